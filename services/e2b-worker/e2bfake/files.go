package e2bfake

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxio/sandboxio/internal/envdpb/filesystem"
)

// fileSignature is envd's presigned-URL signature.
func fileSignature(p, op, user, token, expiration string) string {
	s := p + ":" + op + ":" + user + ":" + token
	if expiration != "" {
		s += ":" + expiration
	}
	sum := sha256.Sum256([]byte(s))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// serveFiles is envd's GET/POST /files.
func (sb *sandbox) serveFiles(w http.ResponseWriter, r *http.Request) {
	s := sb.srv
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "path", "username", "signature", "signature_expiration":
		default:
			s.deviate(r, "unknown /files query parameter %q", k)
		}
	}
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		s.deviate(r, "/files supports GET and POST only")
		w.Header().Set("Allow", "GET, POST")
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	user := q.Get("username")
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	if sb.token != "" && r.Header.Get("X-Access-Token") != sb.token {
		sig := q.Get("signature")
		exp := q.Get("signature_expiration")
		valid := sig != "" && sig == fileSignature(q.Get("path"), op, user, sb.token, exp)
		if valid && exp != "" {
			if n, err := strconv.ParseInt(exp, 10, 64); err != nil || time.Now().Unix() > n {
				valid = false
			}
		}
		if !valid {
			if sig == "" {
				s.deviate(r, "/files on a secure sandbox needs X-Access-Token or a signature")
			}
			writeEnvdHTTPError(w, http.StatusUnauthorized, "unauthorized access, please provide a valid access token or method signing if supported")
			return
		}
	}
	if user == "" {
		user = defaultUser
	} else if _, ok := users[user]; !ok {
		writeEnvdHTTPError(w, http.StatusUnauthorized, fmt.Sprintf("error looking up user '%s': user: unknown user %s", user, user))
		return
	}
	if r.Method == http.MethodGet {
		sb.download(w, r, user)
		return
	}
	sb.upload(w, r, user)
}

func (sb *sandbox) download(w http.ResponseWriter, r *http.Request, user string) {
	p := r.URL.Query().Get("path")
	if p == "" {
		sb.srv.deviate(r, "download without path")
	}
	sp, host := sb.hostPath(p, user)
	fi, err := os.Stat(host)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			writeEnvdHTTPError(w, http.StatusNotFound, fmt.Sprintf("path '%s' does not exist", sp))
			return
		}
		writeEnvdHTTPError(w, http.StatusInternalServerError, "error checking if path exists: "+sb.scrub(err.Error()))
		return
	}
	if fi.IsDir() {
		writeEnvdHTTPError(w, http.StatusBadRequest, fmt.Sprintf("path '%s' is a directory", sp))
		return
	}
	f, err := os.Open(host)
	if err != nil {
		writeEnvdHTTPError(w, http.StatusInternalServerError, "error opening file: "+sb.scrub(err.Error()))
		return
	}
	defer f.Close()
	name := path.Base(sp)
	w.Header().Set("Content-Disposition", "inline; filename="+name)
	w.Header().Set("Vary", "Accept-Encoding")
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		data, err := io.ReadAll(f)
		if err != nil {
			writeEnvdHTTPError(w, http.StatusInternalServerError, "error reading file: "+sb.scrub(err.Error()))
			return
		}
		ctype := mime.TypeByExtension(filepath.Ext(name))
		if ctype == "" {
			ctype = http.DetectContentType(data)
		}
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(data)
		_ = zw.Flush()
		_ = zw.Close()
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Type", ctype)
		w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
		_, _ = w.Write(buf.Bytes())
		return
	}
	http.ServeContent(w, r, name, fi.ModTime(), f)
}

func acceptsGzip(h string) bool {
	for _, part := range strings.Split(h, ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && !strings.Contains(strings.ReplaceAll(params, " ", ""), "q=0") {
			return true
		}
	}
	return false
}

type writeInfo struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Type string `json:"type"`
}

func (sb *sandbox) upload(w http.ResponseWriter, r *http.Request, user string) {
	s := sb.srv
	q := r.URL.Query()
	ct := r.Header.Get("Content-Type")
	mt, params, _ := mime.ParseMediaType(ct)
	var infos []writeInfo
	switch mt {
	case "multipart/form-data":
		mr := multipart.NewReader(r.Body, params["boundary"])
		var parts int
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				writeEnvdHTTPError(w, http.StatusBadRequest, "error parsing multipart form: "+err.Error())
				return
			}
			if part.FormName() != "file" {
				s.deviate(r, "multipart part named %q, want \"file\"", part.FormName())
				continue
			}
			parts++
			target := q.Get("path")
			if target == "" || parts > 1 {
				// Part.FileName strips directories; envd uses the full name.
				_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
				target = dp["filename"]
			}
			wi, status, err := sb.writeFile(target, user, part)
			if err != nil {
				writeEnvdHTTPError(w, status, err.Error())
				return
			}
			infos = append(infos, wi)
		}
	case "application/octet-stream":
		if q.Get("path") == "" {
			s.deviate(r, "raw (octet-stream) upload without the path query parameter")
			writeEnvdHTTPError(w, http.StatusBadRequest, "path query parameter is required for raw body upload")
			return
		}
		var body io.Reader = r.Body
		if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				writeEnvdHTTPError(w, http.StatusBadRequest, "error decompressing body: "+err.Error())
				return
			}
			body = zr
		}
		wi, status, err := sb.writeFile(q.Get("path"), user, body)
		if err != nil {
			writeEnvdHTTPError(w, status, err.Error())
			return
		}
		infos = append(infos, wi)
	default:
		s.deviate(r, "upload Content-Type %q, want multipart/form-data or application/octet-stream", ct)
		writeEnvdHTTPError(w, http.StatusBadRequest, "unsupported content type: "+ct)
		return
	}
	b, _ := json.Marshal(infos)
	if infos == nil {
		b = []byte("[]")
	}
	// envd sets no Content-Type; net/http sniffs "text/plain; charset=utf-8".
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// writeFile writes r to a sandbox path, creating parents.
func (sb *sandbox) writeFile(p, user string, r io.Reader) (writeInfo, int, error) {
	if p == "" {
		return writeInfo{}, http.StatusBadRequest, errors.New("path is required")
	}
	sp, host := sb.hostPath(p, user)
	if fi, err := os.Stat(host); err == nil && fi.IsDir() {
		return writeInfo{}, http.StatusBadRequest, fmt.Errorf("path '%s' is a directory", sp)
	}
	dirs := sb.missingAncestors(filepath.Dir(host))
	if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
		return writeInfo{}, http.StatusInternalServerError, fmt.Errorf("error creating directory: %s", sb.scrub(err.Error()))
	}
	for _, d := range dirs {
		chownTo(d, user)
	}
	for _, d := range dirs {
		sb.watchers.notify(sb, d, filesystem.EventType_EVENT_TYPE_CREATE)
	}
	_, statErr := os.Stat(host)
	f, err := os.OpenFile(host, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return writeInfo{}, http.StatusInternalServerError, fmt.Errorf("error opening file: %s", sb.scrub(err.Error()))
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if statErr != nil {
		chownTo(host, user)
	}
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return writeInfo{}, http.StatusInsufficientStorage, errors.New("not enough disk space available")
		}
		return writeInfo{}, http.StatusInternalServerError, fmt.Errorf("error writing file: %s", sb.scrub(err.Error()))
	}
	// envd's inotify events reach watchers after the write, so every entry
	// already shows the final size.
	if statErr != nil {
		sb.watchers.notify(sb, host, filesystem.EventType_EVENT_TYPE_CREATE)
		sb.watchers.notify(sb, host, filesystem.EventType_EVENT_TYPE_CHMOD)
	}
	sb.watchers.notify(sb, host, filesystem.EventType_EVENT_TYPE_WRITE)
	return writeInfo{Name: path.Base(sp), Path: sp, Type: "file"}, 0, nil
}
