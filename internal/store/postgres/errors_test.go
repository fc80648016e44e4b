package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"hookd/internal/store"
)

// TestErrorsMapToOutages: what PostgreSQL or the network answers when the
// database cannot take work maps to ErrUnavailable or ErrFull; a
// statement's own fault stays as it is.
func TestErrorsMapToOutages(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: "connection refused"}}
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"disk_full", &pgconn.PgError{Code: "53100"}, store.ErrFull},
		{"too_many_connections", &pgconn.PgError{Code: "53300"}, store.ErrUnavailable},
		{"admin_shutdown", &pgconn.PgError{Code: "57P01"}, store.ErrUnavailable},
		{"cannot_connect_now", &pgconn.PgError{Code: "57P03"}, store.ErrUnavailable},
		{"connection_failure", &pgconn.PgError{Code: "08006"}, store.ErrUnavailable},
		{"read-only standby", &pgconn.PgError{Code: "25006"}, store.ErrUnavailable},
		{"dial refused", fmt.Errorf("acquire: %w", refused), store.ErrUnavailable},
		{"connection lost", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), store.ErrUnavailable},
		{"pooled connection closed", fmt.Errorf("begin: %w", pgconn.ErrConnClosed), store.ErrUnavailable},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, store.ErrUnavailable},
		{"pool wait past the deadline", fmt.Errorf("acquire: %w", context.DeadlineExceeded), store.ErrUnavailable},
		{"unique_violation", &pgconn.PgError{Code: "23505"}, store.ErrConflict},
	} {
		if got := mapErr(c.err); !errors.Is(got, c.want) {
			t.Errorf("%s: mapErr(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
	for _, err := range []error{&pgconn.PgError{Code: "22P02"}, &pgconn.PgError{Code: "57014"}, errors.New("a bug")} {
		if got := mapErr(err); errors.Is(got, store.ErrUnavailable) || errors.Is(got, store.ErrFull) {
			t.Errorf("mapErr(%v) = %v: a statement's own fault taken for an outage", err, got)
		}
	}
}
