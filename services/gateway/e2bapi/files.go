package e2bapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxio/sandboxio/internal/envdpb/filesystem"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// writeInfo is one entry of an upload's reply.
type writeInfo struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Type string `json:"type"`
}

// serveFiles is envd's /files: GET downloads, POST uploads (multipart
// parts named "file", or an octet-stream body).
func (a *API) serveFiles(w http.ResponseWriter, r *http.Request, t *target) {
	q := r.URL.Query()
	if u := q.Get("username"); !knownUsers[u] {
		writeEnvdHTTPError(w, http.StatusUnauthorized, fmt.Sprintf("error looking up user '%s': user: unknown user %s", truncate(u, 64), truncate(u, 64)))
		return
	}
	a.filesActive.Add(1)
	defer a.filesActive.Add(-1)
	release, ok := a.transfers.acquire(r.Context(), t.tenant)
	if !ok {
		return
	}
	defer release()
	// The client has TransferTimeout to send its body or take the file:
	// one that trickles gives its slot back then. (Without support for
	// deadlines, as in a ResponseRecorder, there is none.)
	rc := http.NewResponseController(w)
	deadline := time.Now().Add(a.cfg.TransferTimeout)
	switch r.Method {
	case http.MethodGet:
		_ = rc.SetWriteDeadline(deadline)
		defer func() { _ = rc.SetWriteDeadline(time.Time{}) }() // the connection may serve more requests
		a.download(w, r, t, q.Get("path"))
	case http.MethodPost:
		a.upload(w, r, t, q.Get("path"), func(reading bool) {
			if reading {
				_ = rc.SetReadDeadline(deadline)
			} else {
				// Once the body is read the server watches the connection
				// for its close, which a passed deadline would end as one
				// (cancelling the request while its file is written).
				_ = rc.SetReadDeadline(time.Time{})
			}
		})
	default:
		writeEnvdHTTPError(w, http.StatusMethodNotAllowed, "method not allowed")
	}
}

func (a *API) download(w http.ResponseWriter, r *http.Request, t *target, p string) {
	abs, err := absPath(p)
	if err != nil {
		writeEnvdHTTPError(w, http.StatusBadRequest, "invalid path")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.RequestTimeout)
	defer cancel()
	data, err := t.cl.ReadFile(ctx, t.id, abs)
	if err != nil {
		fsvc := &filesystemService{a: a}
		e, serr := fsvc.stat(ctx, t, abs)
		switch {
		case serr == nil && e.GetType() == filesystem.FileType_FILE_TYPE_DIRECTORY:
			writeEnvdHTTPError(w, http.StatusBadRequest, fmt.Sprintf("path '%s' is a directory", abs))
		case errors.Is(err, events.ErrFileNotFound) || connect.CodeOf(serr) == connect.CodeNotFound:
			writeEnvdHTTPError(w, http.StatusNotFound, fmt.Sprintf("path '%s' does not exist", abs))
		case statusOf(err) == http.StatusBadRequest:
			writeEnvdHTTPError(w, http.StatusBadRequest, messageOf(err))
		default:
			writeEnvdHTTPError(w, http.StatusInternalServerError, messageOf(err))
		}
		return
	}
	name := path.Base(abs)
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = http.DetectContentType(data)
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": name}))
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(data))
}

// upload serves a POST; bodyDeadline(true) is called before the body is
// read, bodyDeadline(false) before what was read is written.
func (a *API) upload(w http.ResponseWriter, r *http.Request, t *target, p string, bodyDeadline func(reading bool)) {
	if r.ContentLength > a.cfg.MaxUploadBytes {
		writeEnvdHTTPError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("upload of %d bytes exceeds the limit of %d", r.ContentLength, a.cfg.MaxUploadBytes))
		return
	}
	body := http.MaxBytesReader(w, r.Body, a.cfg.MaxUploadBytes)
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.RequestTimeout)
	defer cancel()
	var out []writeInfo
	write := func(target string, rd io.Reader) bool {
		abs, err := absPath(target)
		if err != nil {
			writeEnvdHTTPError(w, http.StatusBadRequest, "invalid path")
			return false
		}
		data, err := io.ReadAll(rd)
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				writeEnvdHTTPError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("upload exceeds the limit of %d bytes", a.cfg.MaxUploadBytes))
				return false
			}
			if a.bodyTimedOut(w, err) {
				return false
			}
			writeEnvdHTTPError(w, http.StatusBadRequest, "error reading the upload")
			return false
		}
		bodyDeadline(false)
		if err := t.cl.WriteFile(ctx, t.id, abs, data, 0); err != nil {
			bodyDeadline(true) // the server may read what is left of it
			status := http.StatusInternalServerError
			if errors.Is(err, events.ErrStorageQuota) || errors.Is(err, events.ErrObjectQuotaExceeded) {
				status = http.StatusInsufficientStorage
			} else if statusOf(err) == http.StatusBadRequest {
				status = http.StatusBadRequest
			}
			writeEnvdHTTPError(w, status, messageOf(err))
			return false
		}
		out = append(out, writeInfo{Name: path.Base(abs), Path: abs, Type: "file"})
		return true
	}
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case ct == "multipart/form-data":
		mr := multipart.NewReader(body, params["boundary"])
		parts := 0
		for {
			bodyDeadline(true)
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				bodyDeadline(false)
				break
			}
			if err != nil {
				var mbe *http.MaxBytesError
				if errors.As(err, &mbe) {
					writeEnvdHTTPError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("upload exceeds the limit of %d bytes", a.cfg.MaxUploadBytes))
					return
				}
				if a.bodyTimedOut(w, err) {
					return
				}
				writeEnvdHTTPError(w, http.StatusBadRequest, "error parsing multipart form")
				return
			}
			if part.FormName() != "file" {
				continue
			}
			parts++
			if parts > 1000 {
				writeEnvdHTTPError(w, http.StatusBadRequest, "too many files in one upload")
				return
			}
			target := p
			if target == "" {
				// The whole path: Part.FileName keeps only its base.
				_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
				target = dp["filename"]
			}
			if target == "" {
				writeEnvdHTTPError(w, http.StatusBadRequest, "no path given for the file")
				return
			}
			if !write(target, part) {
				return
			}
		}
		if parts == 0 {
			writeEnvdHTTPError(w, http.StatusBadRequest, "no file part in the form")
			return
		}
	case ct == "application/octet-stream":
		if p == "" {
			writeEnvdHTTPError(w, http.StatusBadRequest, "path query parameter is required for raw body upload")
			return
		}
		bodyDeadline(true)
		if !write(p, body) {
			return
		}
	default:
		writeEnvdHTTPError(w, http.StatusBadRequest, fmt.Sprintf("unsupported content type %q", truncate(ct, 64)))
		return
	}
	b, _ := json.Marshal(out)
	// envd answers JSON labelled text/plain.
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// bodyTimedOut answers 408 when err is the body's read deadline.
func (a *API) bodyTimedOut(w http.ResponseWriter, err error) bool {
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return false
	}
	w.Header().Set("Connection", "close") // what is left of the body is not read
	writeEnvdHTTPError(w, http.StatusRequestTimeout, fmt.Sprintf("the upload's body did not arrive within %s", a.cfg.TransferTimeout))
	return true
}

// transferSlots bounds the /files transfers under way: all of them, and
// each tenant's, so that one tenant cannot hold every slot.
type transferSlots struct {
	all       chan struct{}
	perTenant int

	mu      sync.Mutex
	tenants map[string]*tenantSlots
}

type tenantSlots struct {
	held  chan struct{}
	users int // requests holding or waiting for one of held
}

func newTransferSlots(total, perTenant int) *transferSlots {
	return &transferSlots{all: make(chan struct{}, total), perTenant: perTenant, tenants: map[string]*tenantSlots{}}
}

// acquire waits, while ctx lasts, for one of tenant's slots and then one of
// all; release gives both back.
func (s *transferSlots) acquire(ctx context.Context, tenant string) (release func(), ok bool) {
	s.mu.Lock()
	ts := s.tenants[tenant]
	if ts == nil {
		ts = &tenantSlots{held: make(chan struct{}, s.perTenant)}
		s.tenants[tenant] = ts
	}
	ts.users++
	s.mu.Unlock()
	leave := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if ts.users--; ts.users == 0 {
			delete(s.tenants, tenant)
		}
	}
	select {
	case ts.held <- struct{}{}:
	case <-ctx.Done():
		leave()
		return nil, false
	}
	select {
	case s.all <- struct{}{}:
	case <-ctx.Done():
		<-ts.held
		leave()
		return nil, false
	}
	return func() {
		<-s.all
		<-ts.held
		leave()
	}, true
}

// checkSignature verifies a presigned /files URL: signature =
// v1_ + base64(sha256("path:operation:username:token[:expiration]")) with
// the sandbox's access token, not expired. It finds the sandbox's tenant
// with an operator lookup (the services account sees every sandbox).
func (a *API) checkSignature(r *http.Request, id string) (string, bool) {
	q := r.URL.Query()
	sig := q.Get("signature")
	if !strings.HasPrefix(sig, "v1_") || !events.ValidID(id) {
		return "", false
	}
	exp := q.Get("signature_expiration")
	if exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || time.Now().Unix() > n {
			return "", false
		}
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.RequestTimeout)
	defer cancel()
	sb, err := a.operator().Get(ctx, id)
	if err != nil || !events.ValidTenant(sb.Tenant) || sb.Tenant == events.TenantOpen {
		return "", false
	}
	payload := q.Get("path") + ":" + op + ":" + q.Get("username") + ":" + a.accessToken(id, sb.Tenant)
	if exp != "" {
		payload += ":" + exp
	}
	sum := sha256.Sum256([]byte(payload))
	want := "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
	if subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return "", false
	}
	return sb.Tenant, true
}
