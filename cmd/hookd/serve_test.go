package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPprofAddrMustBeLoopback(t *testing.T) {
	for _, c := range []struct {
		addr string
		ok   bool
	}{
		{"", true}, // off
		{"127.0.0.1:6060", true},
		{"127.9.9.9:0", true},
		{"[::1]:6060", true},
		{"[::ffff:127.0.0.1]:6060", true},
		{"localhost:6060", true},
		{":6060", false}, // every interface
		{"0.0.0.0:6060", false},
		{"[::]:6060", false},
		{"10.0.0.1:6060", false},
		{"192.168.1.10:6060", false},
		{"example.com:6060", false},
		{"127.0.0.1", false}, // no port
	} {
		err := checkPprofAddr(c.addr)
		if (err == nil) != c.ok {
			t.Errorf("checkPprofAddr(%q) = %v, want ok=%v", c.addr, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--pprof") {
			t.Errorf("checkPprofAddr(%q): error %q does not name the flag", c.addr, err)
		}
	}
}

// serve refuses a non-loopback --pprof (or HOOKD_PPROF) before opening
// anything: no database file appears.
func TestServeRefusesNonLoopbackPprof(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		env  string
	}{
		{"flag", []string{"--pprof", "0.0.0.0:6060"}, ""},
		{"env", nil, "192.168.1.10:6060"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("HOOKD_PPROF", c.env)
			db := filepath.Join(t.TempDir(), "hookd.db")
			var stdout, stderr bytes.Buffer
			args := append([]string{"serve", "--db", db, "--addr", "127.0.0.1:0", "--admin-token", "t"}, c.args...)
			err := run(context.Background(), args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), "loopback") {
				t.Fatalf("serve %v with HOOKD_PPROF=%q: err = %v, want a refusal naming loopback", args, c.env, err)
			}
			if _, err := os.Stat(db); !os.IsNotExist(err) {
				t.Errorf("database opened before the flag was refused (stat: %v)", err)
			}
		})
	}
}

func TestPprofServesTheProfilerOnLoopback(t *testing.T) {
	srv, ln, err := servePprof("127.0.0.1:0", net.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	resp, err := http.Get("http://" + ln.Addr().String() + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(body) == 0 {
		t.Fatalf("GET /debug/pprof/cmdline: %d %q", resp.StatusCode, body)
	}
	if _, _, err := servePprof("0.0.0.0:0", net.Listen); err == nil {
		t.Fatal("servePprof listened on every interface")
	}
}

// A lease TTL too short to renew within is refused before anything opens,
// from the flag or from HOOKD_LEASE_TTL.
func TestServeRefusesTooShortLeaseTTL(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		env  string
	}{
		{"flag", []string{"--lease-ttl", "100ms"}, ""},
		{"env", nil, "10ms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("HOOKD_LEASE_TTL", c.env)
			db := filepath.Join(t.TempDir(), "hookd.db")
			var stdout, stderr bytes.Buffer
			args := append([]string{"serve", "--db", db, "--addr", "127.0.0.1:0", "--admin-token", "t"}, c.args...)
			err := run(context.Background(), args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), "--lease-ttl") {
				t.Fatalf("serve %v with HOOKD_LEASE_TTL=%q: err = %v, want a refusal naming --lease-ttl", args, c.env, err)
			}
			if _, err := os.Stat(db); !os.IsNotExist(err) {
				t.Errorf("database opened before the flag was refused (stat: %v)", err)
			}
		})
	}
}

// A negative or sub-hour retention, a negative shed threshold, a limit out of range or a
// metrics address without a port is refused before anything opens.
func TestServeRefusesNegativeDurationsAndCounts(t *testing.T) {
	for _, c := range [][2]string{{"--retention", "-1h"}, {"--retention", "1ns"}, {"--retention", "59m"}, {"--shed-backlog", "-1"}, {"--idle-timeout", "0s"},
		{"--ingest-rate", "-1"}, {"--ingest-rate", "NaN"}, {"--ingest-burst", "0"}, {"--max-subscriptions", "-1"}, {"--metrics-addr", "9464"},
		{"--shutdown-timeout", "0s"}, {"--shutdown-timeout", "-5s"},
		// A stray argument ends Go's flag parsing: the flags after it were dropped.
		{"stray.db", "--retention"}} {
		db := filepath.Join(t.TempDir(), "hookd.db")
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), []string{"serve", "--db", db, "--addr", "127.0.0.1:0", "--admin-token", "t",
			c[0], c[1]}, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), c[0]) {
			t.Fatalf("serve %s %s: err = %v, want a refusal naming %s", c[0], c[1], err, c[0])
		}
		if _, err := os.Stat(db); !os.IsNotExist(err) {
			t.Errorf("%s: database opened before the flag was refused (stat: %v)", c[0], err)
		}
	}
}

// TestServeMetricsListener: --metrics-addr serves /metrics without
// credentials on its own listener (and nothing else there), while the API
// port refuses it without the admin token.
func TestServeMetricsListener(t *testing.T) {
	db := filepath.Join(t.TempDir(), "hookd.db")
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--db", db, "--addr", "127.0.0.1:0", "--admin-token", "t",
			"--metrics-addr", "127.0.0.1:0", "--log-level", "error"}, pw, io.Discard)
		pw.Close()
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	var api, metrics string
	lines := bufio.NewScanner(pr)
	for (api == "" || metrics == "") && lines.Scan() {
		if _, rest, ok := strings.Cut(lines.Text(), "listening on "); ok {
			api = strings.Fields(rest)[0]
		}
		if _, rest, ok := strings.Cut(lines.Text(), "metrics on "); ok {
			metrics = strings.Fields(rest)[0]
		}
	}
	go io.Copy(io.Discard, pr)
	if api == "" || metrics == "" {
		t.Fatalf("serve printed API %q and metrics %q", api, metrics)
	}
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := get(metrics); st != 200 || !strings.Contains(body, "hookd_events_accepted_total") {
		t.Errorf("GET %s: %d, want 200 with hookd's metrics", metrics, st)
	}
	if st, _ := get(strings.TrimSuffix(metrics, "/metrics") + "/v1/subscriptions"); st != 404 {
		t.Errorf("the metrics listener answers the API: %d, want 404", st)
	}
	if st, body := get(api + "/metrics"); st != 401 || strings.Contains(body, "hookd_") {
		t.Errorf("GET %s/metrics without a token: %d, want 401 and no metric", api, st)
	}
}

func TestServeRefusesBadNetworkFlags(t *testing.T) {
	for _, c := range []struct{ flag, value, want string }{
		{"--addr", "", `--addr "": want host:port`},
		{"--addr", "8080", `--addr "8080": want host:port`},
		{"--allow-network", "127.0.0.1", `--allow-network "127.0.0.1": not a CIDR (127.0.0.0/8) or host:port`},
		{"--allow-network", "127.0.0.1:0", `--allow-network "127.0.0.1:0": port must be`},
		{"--allow-network", "10.0.0.0/40", `--allow-network "10.0.0.0/40": not a CIDR`},
		{"--egress-proxy", "https://proxy.internal:4750", `--egress-proxy "https://proxy.internal:4750": the scheme must be http://`},
		{"--egress-proxy", "http://user:secret@proxy.internal", `--egress-proxy "http://user:xxxxx@proxy.internal": needs a host and a port`},
	} {
		db := filepath.Join(t.TempDir(), "hookd.db")
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), []string{"serve", "--db", db, "--addr", "127.0.0.1:0", "--admin-token", "t",
			c.flag, c.value}, &stdout, &stderr)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("serve %s %s: err = %v, want prefix %q", c.flag, c.value, err, c.want)
		}
		if _, err := os.Stat(db); !os.IsNotExist(err) {
			t.Errorf("%s %s: database opened before the flag was refused (stat: %v)", c.flag, c.value, err)
		}
	}
}

// On PostgreSQL serve refuses to start without a secret key, naming the
// flag, before connecting to anything.
func TestServeRefusesPostgresWithoutSecretKey(t *testing.T) {
	t.Setenv("HOOKD_SECRET_KEY", "")
	t.Setenv("HOOKD_SECRET_KEY_FILE", "")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"serve", "--db", "postgres://hookd@127.0.0.1:1/none", "--addr", "127.0.0.1:0", "--admin-token", "t"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--secret-key-file") || !strings.Contains(err.Error(), "HOOKD_SECRET_KEY") {
		t.Fatalf("serve on PostgreSQL without a key: %v, want a refusal naming --secret-key-file and HOOKD_SECRET_KEY", err)
	}
}

// --help says the key file's format.
func TestServeHelpSaysTheKeyFormat(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"serve", "--help"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-secret-key-file", "base64 of 32 random bytes", "HOOKD_SECRET_KEY"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("serve --help does not say %q", want)
		}
	}
}
