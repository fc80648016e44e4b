package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"hookd/internal/bench"
)

// serveReceiversFlag is the hidden first argument that turns `hookd bench`
// into the receiver fleet of `--receivers-process`: it prints its ports
// as one JSON line and serves until stdin closes. Its form is
// `--serve-receivers [--shared-host] N`.
const serveReceiversFlag = "--serve-receivers"

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) >= 1 && args[0] == serveReceiversFlag {
		rest, shared := args[1:], false
		if len(rest) == 2 && rest[0] == bench.SharedHostArg {
			rest, shared = rest[1:], true
		}
		if len(rest) != 1 {
			return fmt.Errorf("%s takes [%s] and the number of receivers", serveReceiversFlag, bench.SharedHostArg)
		}
		n, err := strconv.Atoi(rest[0])
		if err != nil {
			return fmt.Errorf("%s: %w", serveReceiversFlag, err)
		}
		return bench.ServeReceivers(n, shared, os.Stdin, stdout)
	}

	fs := newFlagSet("bench", "bench [flags]", stderr)
	scenario := fs.String("scenario", bench.Throughput, "throughput, baseline, isolation or backlog")
	duration := fs.Duration("duration", 10*time.Second, "load phase (isolation: each of its two phases)")
	drain := fs.Duration("drain", 0, "bound on the wait for accepted events to be delivered after the load (default 30s; backlog: 2×backlog/rate + 30s, at most 1h)")
	concurrency := fs.Int("concurrency", 32, "load-generator workers posting events")
	fanout := fs.Int("fanout", 1, "matching subscriptions per event, each with its own receiver port (a separate destination host; see --shared-host)")
	db := fs.String("db", "", "in-process hookd: SQLite file (default: a fresh file in a temp dir, removed after) or postgres:// URL; HOOKD_DB is not read here, it names serve's database")
	target := fs.String("target", "", "bench a running hookd at this loopback URL instead of starting one; it must have been started with --allow-network 127.0.0.0/8")
	adminToken := fs.String("admin-token", "", "admin token of --target")
	receiversProcess := fs.Bool("receivers-process", false, "run the receiver fleet in a separate process (this binary, re-executed)")
	sharedHost := fs.Bool("shared-host", false, "serve all receivers on one port, each at its own path (/r0, /r1, …): one destination host with many endpoints, as with Zapier or a gateway")
	jsonOut := fs.Bool("json", false, "print the summary as one JSON object on the last line")
	backlog := fs.Int("backlog", 100000, "backlog: events posted while the endpoint is down")
	rate := fs.Float64("rate", 200, "backlog: the subscription's rate_limit, deliveries per second")
	rateEvents := fs.Float64("rate-events", 200, "isolation: events posted per second, in total")
	interval := fs.Duration("interval", 2*time.Second, "how often a progress line is printed")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the process (hookd in-process, load generator, receivers) from the first hookd phase to the end (throughput's baseline phase left out) to this file")
	getenv := func(k string) string {
		if k == "HOOKD_DB" {
			return ""
		}
		return os.Getenv(k)
	}
	if err := parseFlags(fs, args, getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	opts := bench.Options{
		Scenario: *scenario, Duration: *duration, Drain: *drain,
		Concurrency: *concurrency, Fanout: *fanout, DB: *db,
		Target: *target, AdminToken: *adminToken, SharedHost: *sharedHost,
		Backlog: *backlog, Rate: *rate, RateEvents: *rateEvents,
		Interval: *interval, Version: version, Out: stdout,
	}
	if *receiversProcess {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("--receivers-process: %w", err)
		}
		opts.ReceiversCommand = []string{exe, "bench", serveReceiversFlag}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		opts.CPUProfile = f
	}
	sum, err := bench.Run(ctx, opts)
	if sum != nil {
		if *jsonOut {
			line, jerr := json.Marshal(sum)
			if jerr != nil {
				return jerr
			}
			fmt.Fprintf(stdout, "%s\n", line)
		} else {
			out, _ := json.MarshalIndent(sum, "", "  ")
			fmt.Fprintf(stdout, "summary:\n%s\n", out)
		}
	}
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if sum.Lost > 0 {
		return fmt.Errorf("bench: %d accepted events were not delivered to every matching receiver", sum.Lost)
	}
	return nil
}
