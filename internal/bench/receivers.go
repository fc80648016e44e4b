package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"hookd/webhook"
)

// Mode is how a receiver answers.
type Mode int32

const (
	ModeOK   Mode = iota // 200 at once, after reading the body
	ModeDown             // 503 at once
	ModeHang             // hold the request until the sender gives up (bounded by hangLimit)
)

// hangLimit bounds how long a hanging receiver holds one request.
const hangLimit = 60 * time.Second

// maxSeq bounds the seen-set a receiver keeps (256 Mi events, 32 MiB).
const maxSeq = 1 << 28

// sigSampleEvery: a receiver verifies the signature of one request in this many.
const sigSampleEvery = 64

// bitset is a growable set of small integers.
type bitset struct{ words []uint64 }

// set adds i and reports whether it was already there.
func (b *bitset) set(i uint64) bool {
	w := int(i / 64)
	if w >= len(b.words) {
		n := max(2*len(b.words), w+1, 1024)
		nw := make([]uint64, n)
		copy(nw, b.words)
		b.words = nw
	}
	m := uint64(1) << (i % 64)
	had := b.words[w]&m != 0
	b.words[w] |= m
	return had
}

func (b *bitset) has(i uint64) bool {
	w := int(i / 64)
	return w < len(b.words) && b.words[w]&(uint64(1)<<(i%64)) != 0
}

// each calls fn for every member in ascending order.
func (b *bitset) each(fn func(uint64)) {
	for w, word := range b.words {
		for word != 0 {
			t := bits.TrailingZeros64(word)
			fn(uint64(w)*64 + uint64(t))
			word &= word - 1
		}
	}
}

// ReceiverStats is one receiver's counters since its last reset.
type ReceiverStats struct {
	Requests   uint64 `json:"requests"`   // every request, whatever the answer
	Delivered  uint64 `json:"delivered"`  // distinct events answered 200
	Duplicates uint64 `json:"duplicates"` // repeats of an event already answered 200
	Unparsable uint64 `json:"unparsable"` // 200-mode requests without sent_ns/seq
	SigChecked uint64 `json:"sig_checked"`
	SigFailed  uint64 `json:"sig_failed"`
	// MaxPerSec is the most deliveries (200 answers) in any 1 s window
	// (ten 100 ms ticks) since the reset.
	MaxPerSec uint64      `json:"max_per_sec"`
	HistWire  [][2]uint64 `json:"hist"`
	Hist      Hist        `json:"-"`
}

// receiver is one endpoint, an http.Handler; its fleet serves it on a port
// of its own (a separate destination host for hookd) or at a path of a
// port it shares with the others.
type receiver struct {
	url     string
	mode    atomic.Int32
	secret  atomic.Pointer[string]
	release chan struct{} // closed on shutdown: hanging handlers return

	mu    sync.Mutex
	seen  bitset
	st    ReceiverStats
	epoch time.Time
	tick  int64 // last 100 ms tick counted in ring
	ring  [10]uint64
	sum   uint64
}

// field finds `"name":<integer>` in body without a full JSON parse (the
// receiver must stay cheap: it is the baseline's ceiling too).
func field(body []byte, name string) (int64, bool) {
	i := bytes.Index(body, []byte(`"`+name+`":`))
	if i < 0 {
		return 0, false
	}
	i += len(name) + 3
	j := i
	for j < len(body) && (body[j] >= '0' && body[j] <= '9' || body[j] == '-') {
		j++
	}
	v, err := strconv.ParseInt(string(body[i:j]), 10, 64)
	return v, err == nil
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	switch Mode(r.mode.Load()) {
	case ModeDown:
		r.count()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	case ModeHang:
		r.count()
		t := time.NewTimer(hangLimit)
		defer t.Stop()
		select {
		case <-req.Context().Done():
		case <-r.release:
		case <-t.C:
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	now := time.Now()
	sent, ok1 := field(body, "sent_ns")
	seq, ok2 := field(body, "seq")
	r.mu.Lock()
	r.st.Requests++
	n := r.st.Requests
	if !ok1 || !ok2 || seq < 0 || seq >= maxSeq {
		r.st.Unparsable++
	} else if r.seen.set(uint64(seq)) {
		r.st.Duplicates++
	} else {
		r.st.Delivered++
		r.st.Hist.Add(now.Sub(time.Unix(0, sent)).Microseconds())
		r.rate(now)
	}
	r.mu.Unlock()
	if secret := r.secret.Load(); secret != nil && n%sigSampleEvery == 1 {
		err := webhook.Verify(*secret, req.Header, body, now, 0)
		r.mu.Lock()
		r.st.SigChecked++
		if err != nil {
			r.st.SigFailed++
		}
		r.mu.Unlock()
	}
	w.WriteHeader(http.StatusOK)
}

func (r *receiver) count() {
	r.mu.Lock()
	r.st.Requests++
	r.mu.Unlock()
}

// rate keeps a sliding 1 s window of 100 ms ticks. Called with r.mu held.
func (r *receiver) rate(now time.Time) {
	t := int64(now.Sub(r.epoch) / (100 * time.Millisecond))
	if t-r.tick >= int64(len(r.ring)) {
		r.ring, r.sum = [10]uint64{}, 0
	} else {
		for k := r.tick + 1; k <= t; k++ {
			r.sum -= r.ring[k%10]
			r.ring[k%10] = 0
		}
	}
	r.tick = t
	r.ring[t%10]++
	r.sum++
	r.st.MaxPerSec = max(r.st.MaxPerSec, r.sum)
}

func (r *receiver) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = bitset{}
	r.st = ReceiverStats{}
	r.epoch, r.tick, r.ring, r.sum = time.Now(), 0, [10]uint64{}, 0
}

func (r *receiver) stats() ReceiverStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.st
	s.HistWire = nil
	return s
}

func (r *receiver) seenWords() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint64(nil), r.seen.words...)
}

// Fleet is a set of receivers, in this process or in another one.
type Fleet interface {
	URLs() []string
	SetMode(i int, m Mode) error
	SetSecret(i int, secret string) error
	Reset() error
	Stats() ([]ReceiverStats, error)
	// Seen is receiver i's set of distinct delivered seqs, as bitset words.
	Seen(i int) ([]uint64, error)
	// RSSMB is the fleet's own process RSS in MB when it runs apart (else 0).
	RSSMB() float64
	Close() error
}

// localFleet runs the receivers in this process.
type localFleet struct {
	rs   []*receiver
	srvs []*http.Server
}

// NewLocalFleet starts n receivers on loopback in this process, each on its
// own port, or with shared all on one port, receiver i at path /r<i>: one
// destination host for hookd, many endpoints on it.
func NewLocalFleet(n int, shared bool) (Fleet, error) {
	f := &localFleet{}
	for range n {
		f.rs = append(f.rs, &receiver{release: make(chan struct{}), epoch: time.Now()})
	}
	if shared {
		mux := http.NewServeMux()
		base, err := f.serve(mux)
		if err != nil {
			f.Close()
			return nil, err
		}
		for i, r := range f.rs {
			path := "/r" + strconv.Itoa(i)
			mux.Handle(path, r) // exact path: /r1 never takes /r10's requests
			r.url = base + path
		}
		return f, nil
	}
	for _, r := range f.rs {
		base, err := f.serve(r)
		if err != nil {
			f.Close()
			return nil, err
		}
		r.url = base + "/hook"
	}
	return f, nil
}

// serve starts a server for h on a fresh loopback port and returns its base URL.
// Each connection has its own goroutine, so a hanging request holds only its
// own connection, never the port's other paths.
func (f *localFleet) serve(h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	f.srvs = append(f.srvs, srv)
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), nil
}

func (f *localFleet) URLs() []string {
	out := make([]string, len(f.rs))
	for i, r := range f.rs {
		out[i] = r.url
	}
	return out
}

func (f *localFleet) check(i int) error {
	if i < 0 || i >= len(f.rs) {
		return fmt.Errorf("no receiver %d", i)
	}
	return nil
}

func (f *localFleet) SetMode(i int, m Mode) error {
	if err := f.check(i); err != nil {
		return err
	}
	f.rs[i].mode.Store(int32(m))
	return nil
}

func (f *localFleet) SetSecret(i int, secret string) error {
	if err := f.check(i); err != nil {
		return err
	}
	f.rs[i].secret.Store(&secret)
	return nil
}

func (f *localFleet) Reset() error {
	for _, r := range f.rs {
		r.reset()
	}
	return nil
}

func (f *localFleet) Stats() ([]ReceiverStats, error) {
	out := make([]ReceiverStats, len(f.rs))
	for i, r := range f.rs {
		out[i] = r.stats()
	}
	return out, nil
}

func (f *localFleet) Seen(i int) ([]uint64, error) {
	if err := f.check(i); err != nil {
		return nil, err
	}
	return f.rs[i].seenWords(), nil
}

func (f *localFleet) RSSMB() float64 { return 0 }

func (f *localFleet) Close() error {
	for _, r := range f.rs {
		close(r.release) // hanging handlers return
	}
	for _, srv := range f.srvs {
		srv.Close()
	}
	return nil
}

// controlHandler exposes a local fleet to the parent process.
func controlHandler(f *localFleet) http.Handler {
	mux := http.NewServeMux()
	idx := func(r *http.Request) (int, error) {
		i, err := strconv.Atoi(r.URL.Query().Get("i"))
		if err != nil {
			return 0, err
		}
		return i, f.check(i)
	}
	fail := func(w http.ResponseWriter, err error) { http.Error(w, err.Error(), http.StatusBadRequest) }
	mux.HandleFunc("POST /mode", func(w http.ResponseWriter, r *http.Request) {
		i, err := idx(r)
		if err != nil {
			fail(w, err)
			return
		}
		m, err := strconv.Atoi(r.URL.Query().Get("m"))
		if err != nil {
			fail(w, err)
			return
		}
		f.SetMode(i, Mode(m))
	})
	mux.HandleFunc("POST /secret", func(w http.ResponseWriter, r *http.Request) {
		i, err := idx(r)
		if err != nil {
			fail(w, err)
			return
		}
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1024))
		f.SetSecret(i, string(b))
	})
	mux.HandleFunc("POST /reset", func(w http.ResponseWriter, r *http.Request) { f.Reset() })
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		st, _ := f.Stats()
		for i := range st {
			st[i].HistWire = st[i].Hist.sparse()
		}
		json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("GET /seen", func(w http.ResponseWriter, r *http.Request) {
		i, err := idx(r)
		if err != nil {
			fail(w, err)
			return
		}
		words, _ := f.Seen(i)
		buf := make([]byte, 8*len(words))
		for k, v := range words {
			binary.LittleEndian.PutUint64(buf[8*k:], v)
		}
		w.Write(buf)
	})
	return mux
}

// hello is the one line a receiver process prints when it is ready.
type hello struct {
	Control string   `json:"control"`
	URLs    []string `json:"urls"`
}

// ServeReceivers runs n receivers (on one shared port if shared) and a
// control endpoint, prints one JSON line {"control":…,"urls":[…]} to
// stdout, and serves until stdin closes. It is the child side of
// --receivers-process.
func ServeReceivers(n int, shared bool, stdin io.Reader, stdout io.Writer) error {
	if n < 1 || n > 1000 {
		return fmt.Errorf("--serve-receivers: want 1 to 1000 receivers")
	}
	fl, err := NewLocalFleet(n, shared)
	if err != nil {
		return err
	}
	defer fl.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: controlHandler(fl.(*localFleet)), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	line, _ := json.Marshal(hello{Control: "http://" + ln.Addr().String(), URLs: fl.URLs()})
	if _, err := fmt.Fprintf(stdout, "%s\n", line); err != nil {
		return err
	}
	io.Copy(io.Discard, stdin) // until the parent closes our stdin (or dies)
	return nil
}

// remoteFleet drives receivers running in a child process.
type remoteFleet struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	control string
	urls    []string
	client  *http.Client
}

// SharedHostArg is the argument StartRemoteFleet puts before the receiver
// count when the receivers must share one port.
const SharedHostArg = "--shared-host"

// StartRemoteFleet runs argv plus, when shared, SharedHostArg, plus n as the
// last argument; that command must behave like ServeReceivers. It connects
// to it.
func StartRemoteFleet(argv []string, n int, shared bool) (Fleet, error) {
	if len(argv) == 0 {
		return nil, errors.New("receivers process: no command")
	}
	args := append([]string(nil), argv[1:]...)
	if shared {
		args = append(args, SharedHostArg)
	}
	cmd := exec.Command(argv[0], append(args, strconv.Itoa(n))...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("receivers process: %w", err)
	}
	f := &remoteFleet{cmd: cmd, stdin: stdin, client: &http.Client{Timeout: 30 * time.Second}}
	got := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadBytes('\n')
		if err != nil {
			got <- fmt.Errorf("receivers process exited before it was ready: %w", err)
			return
		}
		var h hello
		if err := json.Unmarshal(line, &h); err != nil || h.Control == "" || len(h.URLs) != n {
			got <- fmt.Errorf("receivers process: unexpected first line %q", line)
			return
		}
		if shared && !oneHost(h.URLs) {
			got <- fmt.Errorf("receivers process: asked for one shared port, got %q", h.URLs)
			return
		}
		f.control, f.urls = h.Control, h.URLs
		got <- nil
		io.Copy(io.Discard, stdout)
	}()
	select {
	case err = <-got:
	case <-time.After(30 * time.Second):
		err = errors.New("receivers process: not ready within 30s")
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (f *remoteFleet) URLs() []string { return f.urls }

// oneHost reports whether every URL names the same host:port.
func oneHost(urls []string) bool {
	host := ""
	for i, s := range urls {
		u, err := url.Parse(s)
		if err != nil || (i > 0 && u.Host != host) {
			return false
		}
		host = u.Host
	}
	return true
}

func (f *remoteFleet) call(method, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(context.Background(), method, f.control+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("receivers process: %w", err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("receivers process: %s %s: %d %s", method, path, resp.StatusCode, out)
	}
	return out, err
}

func (f *remoteFleet) SetMode(i int, m Mode) error {
	_, err := f.call("POST", fmt.Sprintf("/mode?i=%d&m=%d", i, m), nil)
	return err
}

func (f *remoteFleet) SetSecret(i int, secret string) error {
	_, err := f.call("POST", fmt.Sprintf("/secret?i=%d", i), []byte(secret))
	return err
}

func (f *remoteFleet) Reset() error {
	_, err := f.call("POST", "/reset", nil)
	return err
}

func (f *remoteFleet) Stats() ([]ReceiverStats, error) {
	b, err := f.call("GET", "/stats", nil)
	if err != nil {
		return nil, err
	}
	var st []ReceiverStats
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("receivers process: stats: %w", err)
	}
	for i := range st {
		st[i].Hist = histFromSparse(st[i].HistWire)
		st[i].HistWire = nil
	}
	return st, nil
}

func (f *remoteFleet) Seen(i int) ([]uint64, error) {
	b, err := f.call("GET", fmt.Sprintf("/seen?i=%d", i), nil)
	if err != nil {
		return nil, err
	}
	words := make([]uint64, len(b)/8)
	for k := range words {
		words[k] = binary.LittleEndian.Uint64(b[8*k:])
	}
	return words, nil
}

func (f *remoteFleet) RSSMB() float64 {
	if f.cmd.Process == nil {
		return 0
	}
	rss, _ := readRSS(fmt.Sprintf("/proc/%d/status", f.cmd.Process.Pid))
	return rss
}

func (f *remoteFleet) Close() error {
	f.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- f.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		f.cmd.Process.Kill()
		<-done
	}
	return nil
}
