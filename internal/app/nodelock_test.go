package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hookd/internal/testenv"
)

// A second node on a SQLite file is refused before it touches it: it
// would accept events against its own stale subscriptions, with no
// deliveries. Once the first shuts down, the file opens again.
func TestOneNodePerSQLiteFile(t *testing.T) {
	t.Parallel()
	cfg := Config{DB: filepath.Join(t.TempDir(), "hookd.db"), AdminToken: adminToken, Version: "test",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	first, stop := serveStoppable(t, cfg)
	first.admin.Must(http.StatusCreated, "POST", "/v1/tenants", map[string]any{"id": "acme"})
	second, err := Open(context.Background(), cfg)
	if err == nil {
		second.Shutdown(context.Background())
		t.Fatal("a second node opened the SQLite file the first one serves")
	}
	if !strings.Contains(err.Error(), "another hookd node") {
		t.Fatalf("second node: %v, want it to name the other node", err)
	}
	stop()
	again, _ := serveStoppable(t, cfg)
	if got := again.admin.Must(http.StatusOK, "GET", "/v1/tenants", nil)["data"].([]any); len(got) != 2 {
		t.Fatalf("after the first node stopped: tenants %v, want default and acme", got)
	}
}

// The database file removed under a running node: writes would go on into
// the open file, which no path reaches, to be lost at the next start. The
// node refuses events (503) and says it is not ready instead.
func TestRemovedSQLiteFileRefusesEvents(t *testing.T) {
	t.Parallel()
	cfg := Config{DB: filepath.Join(t.TempDir(), "hookd.db"), AdminToken: adminToken, Version: "test",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	n, _ := serveStoppable(t, cfg)
	n.admin.Must(http.StatusAccepted, "POST", "/v1/events", map[string]any{"type": "a.b", "payload": map[string]any{}})
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(cfg.DB + suffix); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	if st, out := n.admin.Do("POST", "/v1/events", map[string]any{"type": "a.b", "payload": map[string]any{}}); st != http.StatusServiceUnavailable {
		t.Fatalf("an event after the file was removed: %d %v, want 503", st, out)
	}
	anon := &testenv.Client{T: t, Base: n.base}
	testenv.Eventually(t, 10*time.Second, "/readyz to say not ready", func() bool {
		st, _ := anon.Do("GET", "/readyz", nil)
		return st == http.StatusServiceUnavailable
	})
}
