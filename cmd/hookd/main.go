// Command hookd delivers webhooks. main only wires: every command is a
// function of its arguments and streams, so tests run the real program.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "hookd:", err)
		os.Exit(1)
	}
}

const usage = `hookd delivers webhooks: it takes events over HTTP and POSTs each one,
signed, to every endpoint subscribed to it, retrying for a day.

usage: hookd <command> [flags]

commands:
  serve     run the API and the dispatcher (embedded SQLite by default)
  migrate   create or upgrade the database schema, then exit
  rekey     seal every stored secret under the first secret key (after adding a key)
  purge     run one retention pass now, then exit
  listen    run a local receiver that prints and verifies deliveries
  bench     measure throughput, lag and cost against loopback receivers
  version   print the version

Run 'hookd <command> --help' for a command's flags.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("no command given")
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], stdout, stderr)
	case "migrate":
		return runMigrate(ctx, args[1:], stdout, stderr)
	case "rekey":
		return runRekey(ctx, args[1:], stdout, stderr)
	case "purge":
		return runPurge(ctx, args[1:], stdout, stderr)
	case "listen":
		return runListen(ctx, args[1:], stdout, stderr)
	case "bench":
		return runBench(ctx, args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "hookd", version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}
