package gateway

import (
	"bytes"
	"net/http"
	"net/http/httptest"
)

type bufferRecorder struct {
	h http.Header
	b bytes.Buffer
}

func (r *bufferRecorder) Header() http.Header         { return r.h }
func (r *bufferRecorder) Write(p []byte) (int, error) { return r.b.Write(p) }
func (r *bufferRecorder) WriteHeader(int)             {}

func httptestRequest() *http.Request { return httptest.NewRequest("GET", "/metrics", nil) }
