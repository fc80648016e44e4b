package api

import (
	"context"
	"log/slog"
	"net/http"
	"runtime/debug"

	"hookd/internal/core"
)

type requestIDKey struct{}

// requestID is the ID Wrap gave the request ("" outside Wrap).
func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// Wrap is the outermost handler of hookd's HTTP server. It gives every
// request an ID, answered in X-Request-Id and written in every log line
// about the request, and turns a panic in a handler into a 500 carrying
// that ID, logged once with its stack; the process keeps serving. If the
// answer had begun when the panic came, the connection is cut instead, so
// the client sees a broken answer rather than a short one.
func Wrap(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := core.NewID("req")
		w.Header().Set("X-Request-Id", id)
		rw := &recorder{ResponseWriter: w}
		r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler { // net/http's own way to cut a connection
				panic(v)
			}
			log.Error("handler panicked", "request_id", id, "method", r.Method, "path", r.URL.Path,
				"panic", v, "stack", string(debug.Stack()))
			if rw.wrote {
				panic(http.ErrAbortHandler)
			}
			writeJSON(w, http.StatusInternalServerError, map[string]any{"error": errInternal(id)})
		}()
		next.ServeHTTP(rw, r)
	})
}

// recorder notes whether the answer has begun.
type recorder struct {
	http.ResponseWriter
	wrote bool
}

func (w *recorder) WriteHeader(code int) {
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }
