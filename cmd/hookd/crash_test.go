package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"hookd/internal/seal"
	"hookd/internal/testenv"
)

var hookdBin string

// TestMain builds the real binary once: the crash test runs it as a process
// so it can be killed with SIGKILL.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hookd-bin")
	if err != nil {
		panic(err)
	}
	hookdBin = filepath.Join(dir, "hookd")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", hookdBin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building hookd:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// clusterKey seals secrets in every PostgreSQL process of these tests.
var clusterKey = seal.NewKey()

type proc struct {
	cmd  *exec.Cmd
	base string
}

// startProc runs `hookd serve` on a free loopback port, with any extra
// flags, and waits until it says where it listens.
func startProc(t *testing.T, db string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--db", db,
		"--admin-token", "crash-admin", "--allow-network", "127.0.0.0/8", "--log-level", "error",
		"--metrics-addr", "127.0.0.1:0"}, extra...)
	cmd := exec.Command(hookdBin, args...)
	if strings.HasPrefix(db, "postgres") {
		// Every node of a cluster holds the same keys; on SQLite the
		// process makes (and after a restart reuses) the key file.
		cmd.Env = append(os.Environ(), "HOOKD_SECRET_KEY="+clusterKey)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if _, rest, ok := strings.Cut(lines.Text(), "listening on "); ok {
			go func() { // keep draining so the process never blocks on stdout
				for lines.Scan() {
				}
			}()
			return &proc{cmd: cmd, base: strings.Fields(rest)[0]}
		}
	}
	t.Fatal("hookd exited before listening")
	return nil
}

func TestKill9MidBurstLosesNoAcceptedEvent(t *testing.T) {
	db := filepath.Join(t.TempDir(), "hookd.db")
	// Until the kill the endpoint answers 503, so every accepted event is
	// still pending in the store when the process dies; afterwards it takes
	// them and records what it took.
	rc := testenv.NewReceiver(t)
	down := downUntilKill(rc)
	p := startProc(t, db)
	admin := &testenv.Client{T: t, Base: p.base, Token: "crash-admin"}
	admin.Must(201, "POST", "/v1/subscriptions", map[string]any{"url": rc.URL, "event_types": []string{"*"},
		"retry_schedule": []string{"1s", "1s", "1s", "1s", "1s", "1s", "1s", "1s", "1s", "1s"}})

	// Ten writers post until the process dies under them.
	var mu sync.Mutex
	var accepted []string
	var wg sync.WaitGroup
	killed := make(chan struct{})
	for w := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				body, _ := json.Marshal(map[string]any{"type": "crash.test", "payload": map[string]any{"w": w, "i": i}})
				req, _ := http.NewRequest("POST", p.base+"/v1/events", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer crash-admin")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return // the process is gone
				}
				var out struct{ ID string }
				json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				if resp.StatusCode == http.StatusAccepted {
					mu.Lock()
					accepted = append(accepted, out.ID)
					mu.Unlock()
				}
				select {
				case <-killed:
					return
				default:
				}
			}
		}()
	}
	testenv.Eventually(t, 20*time.Second, "200 events accepted", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(accepted) >= 200
	})
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	close(killed)
	p.cmd.Wait()
	wg.Wait()
	down.killed.Store(true)
	triedBefore := rc.Count()

	startProc(t, db)
	testenv.Eventually(t, 30*time.Second, "every accepted event delivered after restart", func() bool {
		return down.tookAll(accepted)
	})
	t.Logf("%d accepted before kill -9 (%d attempts answered 503 before it); all delivered after restart",
		len(accepted), triedBefore)
}

func TestSIGTERMLetsInFlightSendFinishAndRecordsIt(t *testing.T) {
	db := filepath.Join(t.TempDir(), "hookd.db")
	arrived, release := make(chan struct{}), make(chan struct{})
	rc := testenv.NewReceiver(t)
	rc.Respond = func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 0 {
			close(arrived)
			<-release // still in flight when the signal comes
		}
		w.WriteHeader(http.StatusOK)
	}
	p := startProc(t, db)
	admin := &testenv.Client{T: t, Base: p.base, Token: "crash-admin"}
	admin.Must(201, "POST", "/v1/subscriptions", map[string]any{"url": rc.URL, "event_types": []string{"*"}})
	ev := admin.Must(202, "POST", "/v1/events", map[string]any{"type": "a.b", "payload": map[string]any{}})["id"].(string)
	<-arrived
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The listener closes first: new requests are refused while the send finishes.
	testenv.Eventually(t, 10*time.Second, "API stops taking requests", func() bool {
		_, err := http.Get(p.base + "/healthz")
		return err != nil
	})
	close(release)
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("hookd exited with %v, want a clean exit", err)
	}

	p2 := startProc(t, db)
	admin2 := &testenv.Client{T: t, Base: p2.base, Token: "crash-admin"}
	ds := admin2.Must(200, "GET", "/v1/events/"+ev, nil)["deliveries"].([]any)
	d := ds[0].(map[string]any)
	if d["state"] != "delivered" || d["attempt_count"].(float64) != 1 {
		t.Errorf("after graceful stop: %v, want delivered after 1 attempt", d)
	}
	if n := rc.Count(); n != 1 {
		t.Errorf("endpoint got %d requests, want 1 (the result was recorded, not resent)", n)
	}
}

// deadEndpoint answers 503 until killed is set (so everything accepted is
// still pending when the process under test dies), then 200, recording
// which events it took.
type deadEndpoint struct {
	killed atomic.Bool
	mu     sync.Mutex
	took   map[string]bool
}

func downUntilKill(rc *testenv.Receiver) *deadEndpoint {
	d := &deadEndpoint{took: map[string]bool{}}
	rc.Respond = func(n int, w http.ResponseWriter, r *http.Request) {
		if !d.killed.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		d.mu.Lock()
		d.took[r.Header.Get("webhook-id")] = true
		d.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}
	return d
}

func (d *deadEndpoint) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.took)
}

// tookAll reports whether every one of ids has been taken.
func (d *deadEndpoint) tookAll(ids []string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range ids {
		if !d.took[id] {
			return false
		}
	}
	return true
}
