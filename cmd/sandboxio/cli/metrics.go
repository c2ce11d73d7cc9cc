package cli

import (
	"bytes"
	"net/http"
)

// joinMetrics serves several Prometheus handlers as one /metrics: each is
// asked for the text format and their expositions follow one another
// (their metric families are distinct: the router's and the auditor's).
func joinMetrics(hs ...http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var all bytes.Buffer
		for _, h := range hs {
			inner := r.Clone(r.Context())
			inner.Header = http.Header{"Accept": {"text/plain; version=0.0.4"}}
			rec := &bufferWriter{header: http.Header{}}
			h.ServeHTTP(rec, inner)
			if rec.code != 0 && rec.code != http.StatusOK {
				http.Error(w, "a metrics source failed: "+http.StatusText(rec.code), http.StatusInternalServerError)
				return
			}
			all.Write(rec.body.Bytes())
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(all.Bytes())
	})
}

// bufferWriter is an http.ResponseWriter that keeps the body.
type bufferWriter struct {
	header http.Header
	body   bytes.Buffer
	code   int
}

func (b *bufferWriter) Header() http.Header         { return b.header }
func (b *bufferWriter) Write(p []byte) (int, error) { return b.body.Write(p) }
func (b *bufferWriter) WriteHeader(code int)        { b.code = code }
