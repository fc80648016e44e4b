package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// serveUntilListening runs `hookd serve` with args on a fresh database and
// a loopback port, and returns its URL and its log; it stops with the test.
func serveUntilListening(t *testing.T, args ...string) (string, *notifyBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := newNotifyBuffer(), newNotifyBuffer()
	args = append([]string{"serve", "--db", filepath.Join(t.TempDir(), "hookd.db"), "--addr", "127.0.0.1:0"}, args...)
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, stdout, stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not return after cancel")
		}
	})
	m := stdout.waitMatch(t, regexp.MustCompile(`listening on (http://127\.0\.0\.1:[0-9]+)`))
	return m[1], stderr
}

func status(t *testing.T, base, token string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/v1/subscriptions", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func writeFile(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}

// The admin token comes from a flag, the environment or a file; short
// tokens and tokens on the command line keep working but are warned of,
// in the log, at start.
func TestAdminTokenSourcesAndWarnings(t *testing.T) {
	long := strings.Repeat("k", 40)
	const (
		weak     = "the admin token is weak"
		cmdline  = "the admin token was given on the command line"
		readable = "the admin token file can be read by other users"
	)
	for _, c := range []struct {
		name  string
		args  func() []string
		env   map[string]string
		token string
		warn  []string
	}{
		{"short flag", func() []string { return []string{"--admin-token", "dev-admin"} }, nil, "dev-admin", []string{weak, cmdline}},
		{"long flag", func() []string { return []string{"--admin-token", long} }, nil, long, []string{cmdline}},
		{"short env", nil, map[string]string{"HOOKD_ADMIN_TOKEN": "dev-admin"}, "dev-admin", []string{weak}},
		{"long env", nil, map[string]string{"HOOKD_ADMIN_TOKEN": long}, long, nil},
		{"file", func() []string { return []string{"--admin-token-file", writeFile(t, "  "+long+"\n", 0o600)} }, nil, long, nil},
		{"short file", func() []string { return []string{"--admin-token-file", writeFile(t, "dev-admin\n", 0o600)} }, nil, "dev-admin", []string{weak}},
		{"file others can read", func() []string { return []string{"--admin-token-file", writeFile(t, long, 0o644)} }, nil, long, []string{readable}},
		{"file from env", nil, map[string]string{"HOOKD_ADMIN_TOKEN_FILE": writeFile(t, long+"\r\n", 0o600)}, long, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range []string{"HOOKD_ADMIN_TOKEN", "HOOKD_ADMIN_TOKEN_FILE"} {
				t.Setenv(k, c.env[k])
			}
			var args []string
			if c.args != nil {
				args = c.args()
			}
			base, log := serveUntilListening(t, args...)
			if st := status(t, base, c.token); st != http.StatusOK {
				t.Errorf("the configured token answers %d, want 200", st)
			}
			if st := status(t, base, c.token+"x"); st != http.StatusUnauthorized {
				t.Errorf("another token answers %d, want 401", st)
			}
			text := log.String()
			for _, w := range []string{weak, cmdline, readable} {
				want := false
				for _, x := range c.warn {
					want = want || x == w
				}
				got := strings.Contains(text, "level=WARN") && strings.Contains(text, w)
				if got != want {
					t.Errorf("warning %q logged: %v, want %v; log:\n%s", w, got, want, text)
				}
			}
			if strings.Contains(text, c.token) {
				t.Errorf("the log shows the token:\n%s", text)
			}
		})
	}
}

// The token comes from one source: a flag or variable and a file at once,
// a missing file or an empty one are refused before anything opens.
func TestAdminTokenRefusals(t *testing.T) {
	long := strings.Repeat("k", 40)
	for _, c := range []struct {
		name, want string
		args       []string
		env        string
	}{
		{"flag and file", "mutually exclusive", []string{"--admin-token", long, "--admin-token-file", writeFile(t, long, 0o600)}, ""},
		{"env and file", "mutually exclusive", []string{"--admin-token-file", writeFile(t, long, 0o600)}, long},
		{"missing file", "--admin-token-file", []string{"--admin-token-file", filepath.Join(t.TempDir(), "nope")}, ""},
		{"empty file", "--admin-token-file", []string{"--admin-token-file", writeFile(t, " \n", 0o600)}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("HOOKD_ADMIN_TOKEN", c.env)
			db := filepath.Join(t.TempDir(), "hookd.db")
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), append([]string{"serve", "--db", db, "--addr", "127.0.0.1:0"}, c.args...), &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one saying %q", err, c.want)
			}
			if _, err := os.Stat(db); !os.IsNotExist(err) {
				t.Errorf("database opened before the refusal (stat: %v)", err)
			}
		})
	}
}
