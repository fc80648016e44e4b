package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"hookd/internal/bench"
)

// lastJSON decodes the last line of out as the summary object.
func lastJSON(t *testing.T, out string) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	last := lines[len(lines)-1]
	var m map[string]any
	if err := json.Unmarshal([]byte(last), &m); err != nil {
		t.Fatalf("last line is not one JSON object: %v\n%s", err, out)
	}
	return m
}

// checkSummary asserts shape and correctness, never speed.
func checkSummary(t *testing.T, m map[string]any, scenario string) {
	t.Helper()
	for _, k := range bench.Required {
		if _, ok := m[k]; !ok {
			t.Errorf("summary has no %q: %v", k, m)
		}
	}
	if m["scenario"] != scenario {
		t.Errorf("scenario = %v, want %s", m["scenario"], scenario)
	}
	if m["lost"] != 0.0 {
		t.Errorf("lost = %v, want 0: %v", m["lost"], m)
	}
	if d, _ := m["deliveries_total"].(float64); d <= 0 {
		t.Errorf("no deliveries: %v", m)
	}
	if m["drained"] != true {
		t.Errorf("not drained: %v", m)
	}
	if m["duplicates"] != 0.0 || m["signature_failures"] != 0.0 || m["unexpected_deliveries"] != 0.0 {
		t.Errorf("duplicates, bad signatures or unexpected deliveries: %v", m)
	}
}

func runBenchCmd(t *testing.T, args ...string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := run(ctx, append([]string{"bench", "--json", "--interval", "500ms"}, args...), &stdout, &stderr); err != nil {
		t.Fatalf("bench %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("bench wrote to stderr (hookd's log should be discarded):\n%s", stderr.String())
	}
	return lastJSON(t, stdout.String())
}

func TestBenchThroughputSmoke(t *testing.T) {
	m := runBenchCmd(t, "--scenario", "throughput", "--duration", "1s", "--concurrency", "4", "--fanout", "2")
	checkSummary(t, m, "throughput")
	if r, _ := m["ratio_to_baseline"].(float64); r <= 0 {
		t.Errorf("ratio_to_baseline = %v, want a measured ratio", m["ratio_to_baseline"])
	}
	if m["fanout"] != 2.0 {
		t.Errorf("fanout = %v", m["fanout"])
	}
	if m["shared_host"] != false {
		t.Errorf("shared_host = %v, want false", m["shared_host"])
	}
}

// --shared-host puts every receiver on one port; the run still delivers
// everything and says so.
func TestBenchSharedHostSmoke(t *testing.T) {
	m := runBenchCmd(t, "--scenario", "throughput", "--duration", "1s", "--concurrency", "4", "--fanout", "3", "--shared-host")
	checkSummary(t, m, "throughput")
	if m["shared_host"] != true {
		t.Errorf("shared_host = %v, want true", m["shared_host"])
	}
}

func TestBenchBaselineSmoke(t *testing.T) {
	m := runBenchCmd(t, "--scenario", "baseline", "--duration", "1s", "--concurrency", "4")
	checkSummary(t, m, "baseline")
}

func TestBenchIsolationSmoke(t *testing.T) {
	m := runBenchCmd(t, "--scenario", "isolation", "--duration", "1s", "--rate-events", "100")
	checkSummary(t, m, "isolation")
	for _, k := range []string{"healthy_lag_p99_ms", "all_healthy_lag_p99_ms", "hanging_attempts"} {
		if _, ok := m[k]; !ok {
			t.Errorf("isolation summary has no %q", k)
		}
	}
	if m["all_healthy_lost"] != 0.0 {
		t.Errorf("all_healthy_lost = %v", m["all_healthy_lost"])
	}
}

func TestBenchBacklogSmoke(t *testing.T) {
	m := runBenchCmd(t, "--scenario", "backlog", "--backlog", "500", "--concurrency", "8", "--drain", "20s")
	checkSummary(t, m, "backlog")
	if m["deliveries_total"] != 500.0 {
		t.Errorf("deliveries_total = %v, want 500", m["deliveries_total"])
	}
	for _, k := range []string{"max_delivery_rate_per_s", "rate_limit", "drain_s"} {
		if _, ok := m[k]; !ok {
			t.Errorf("backlog summary has no %q", k)
		}
	}
}

// The receivers run in a second process: the real binary re-executes
// itself. HOOKD_SHARED_HOST reaches the child: the parent refuses a child
// whose receivers are not on one port.
func TestBenchReceiversProcess(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, hookdBin, "bench", "--json", "--scenario", "throughput",
				"--duration", "1s", "--concurrency", "4", "--fanout", "2", "--receivers-process")
			if shared {
				cmd.Env = append(os.Environ(), "HOOKD_SHARED_HOST=true")
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
			}
			m := lastJSON(t, string(out))
			checkSummary(t, m, "throughput")
			if m["receivers_process"] != true || m["shared_host"] != shared {
				t.Errorf("receivers_process = %v, shared_host = %v, want true, %v", m["receivers_process"], m["shared_host"], shared)
			}
		})
	}
}

// The hidden child command takes N, or --shared-host N.
func TestServeReceiversArgs(t *testing.T) {
	for _, args := range [][]string{
		{"--serve-receivers"},
		{"--serve-receivers", "x"},
		{"--serve-receivers", "2", "--shared-host"},
		{"--serve-receivers", "--shared-host"},
		{"--serve-receivers", "--shared", "2"},
		{"--serve-receivers", "0"},
	} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), append([]string{"bench"}, args...), &stdout, &stderr); err == nil {
			t.Errorf("bench %v: no error", args)
		}
	}
}

func TestBenchRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--scenario", "nope"},
		{"--target", "http://example.com", "--admin-token", "x"},
		{"--target", "http://127.0.0.1:1"},
		{"--db", "postgres://localhost/hookd", "--duration", "1s"},
	} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), append([]string{"bench"}, args...), &stdout, &stderr); err == nil {
			t.Errorf("bench %v: no error", args)
		}
	}
}

// --target benches a hookd running as its own process.
func TestBenchTarget(t *testing.T) {
	p := startProc(t, t.TempDir()+"/hookd.db") // started with --allow-network 127.0.0.0/8
	m := runBenchCmd(t, "--scenario", "throughput", "--duration", "1s", "--concurrency", "4",
		"--target", p.base, "--admin-token", "crash-admin")
	checkSummary(t, m, "throughput")
	if m["target"] != p.base {
		t.Errorf("target = %v, want %s", m["target"], p.base)
	}
}
