package app

import (
	"log/slog"
	"net/http"
	"time"
)

// HTTPTimeouts bound how long a client may hold a connection of the API
// server without finishing what it is doing; a zero field takes its
// default. Only Idle is an operator's flag (--idle-timeout: a load
// balancer's keep-alive must end before the server's); tests shorten the
// others.
type HTTPTimeouts struct {
	ReadHeader time.Duration // request line and headers (default 10s)
	Read       time.Duration // the whole request, body included (default 30s)
	Write      time.Duration // from the end of the headers to the end of the answer (default 2m)
	Idle       time.Duration // a keep-alive connection between requests (default 2m)
}

// Defaults for HTTPTimeouts, and the most header bytes a request may send.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 2 * time.Minute
	DefaultIdleTimeout       = 2 * time.Minute
	MaxHeaderBytes           = 64 << 10
)

// server returns an http.Server for h with t's timeouts, defaults filled in.
func (t HTTPTimeouts) server(h http.Handler, log *slog.Logger) *http.Server {
	or := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: or(t.ReadHeader, DefaultReadHeaderTimeout),
		ReadTimeout:       or(t.Read, DefaultReadTimeout),
		WriteTimeout:      or(t.Write, DefaultWriteTimeout),
		IdleTimeout:       or(t.Idle, DefaultIdleTimeout),
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}
