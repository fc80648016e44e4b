package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
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
