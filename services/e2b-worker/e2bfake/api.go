package e2bfake

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

const clientID = "6532622b"

type apiError struct {
	Code      int    `json:"code"`
	Message   string `json:"message"`
	ErrorCode string `json:"error_code,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeAPIError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Code: status, Message: msg})
}

// field type checkers for request validation.
type fieldKind int

const (
	kString fieldKind = iota
	kInt
	kBool
	kStringMap
	kObject
	kStringList
	kAny
)

var newSandboxFields = map[string]fieldKind{
	"templateID": kString, "timeout": kInt, "metadata": kStringMap, "envVars": kStringMap,
	"autoPause": kBool, "autoPauseMemory": kBool, "autoResume": kObject, "secure": kBool,
	"allow_internet_access": kBool, "network": kObject, "mcp": kObject, "iam": kObject, "volumeMounts": kAny,
}

var networkFields = map[string]fieldKind{
	"allowPublicTraffic": kBool, "allowOut": kStringList, "denyOut": kStringList,
	"egressProxy": kObject, "maskRequestHost": kString, "rules": kObject,
}

// checkFields validates a JSON object against a schema; it returns the
// decoded object and a list of problems (unknown fields, wrong types).
func checkFields(obj map[string]json.RawMessage, schema map[string]fieldKind, where string) []string {
	var probs []string
	for k, raw := range obj {
		kind, ok := schema[k]
		if !ok {
			probs = append(probs, fmt.Sprintf("unknown field %s%q", where, k))
			continue
		}
		if !kindOK(kind, raw) {
			probs = append(probs, fmt.Sprintf("field %s%q has the wrong type: %s", where, k, raw))
		}
	}
	return probs
}

func kindOK(kind fieldKind, raw json.RawMessage) bool {
	switch kind {
	case kString:
		var v string
		return json.Unmarshal(raw, &v) == nil
	case kInt:
		var v int64
		return json.Unmarshal(raw, &v) == nil
	case kBool:
		var v bool
		return json.Unmarshal(raw, &v) == nil
	case kStringMap:
		var v map[string]string
		return json.Unmarshal(raw, &v) == nil
	case kObject:
		var v map[string]any
		return json.Unmarshal(raw, &v) == nil
	case kStringList:
		var v []string
		return json.Unmarshal(raw, &v) == nil
	}
	return true
}

// readObject reads and validates a JSON object body.
func (s *Server) readObject(w http.ResponseWriter, r *http.Request, schema map[string]fieldKind, required bool) (map[string]json.RawMessage, bool) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, "cannot read body")
		return nil, false
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		if required {
			s.deviate(r, "request body is required")
			writeAPIError(w, http.StatusBadRequest, "Request body has an error: value is required but missing")
			return nil, false
		}
		return map[string]json.RawMessage{}, true
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		s.deviate(r, "Content-Type is %q, want application/json", ct)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		s.deviate(r, "body is not a JSON object: %v", err)
		writeAPIError(w, http.StatusBadRequest, "Request body has an error: "+err.Error())
		return nil, false
	}
	probs := checkFields(obj, schema, "")
	if nraw, ok := obj["network"]; ok && schema["network"] == kObject {
		var nobj map[string]json.RawMessage
		if json.Unmarshal(nraw, &nobj) == nil {
			probs = append(probs, checkFields(nobj, networkFields, "network.")...)
		}
	}
	for _, p := range probs {
		s.deviate(r, "%s", p)
	}
	for _, p := range probs {
		if strings.Contains(p, "wrong type") {
			writeAPIError(w, http.StatusBadRequest, "Request body has an error: "+p)
			return nil, false
		}
	}
	return obj, true
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	id := sandboxIDFromPath(r.URL.Path)
	status, retryAfter, delay := s.takeAPIFault(id)
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if r.URL.Path == "/health" && r.Method == http.MethodGet {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "Health check successful")
		return
	}
	key := r.Header.Get("X-API-Key")
	switch {
	case key == "" && r.Header.Get("Authorization") == "":
		s.deviate(r, "missing X-API-Key header")
		writeAPIError(w, http.StatusUnauthorized, "Authorization header is missing")
		return
	case key == "":
		s.deviate(r, "Authorization bearer tokens are deprecated; the SDKs send X-API-Key")
		writeAPIError(w, http.StatusUnauthorized, "Invalid access token")
		return
	case key != s.opts.APIKey:
		writeAPIError(w, http.StatusUnauthorized, "Invalid API key")
		return
	}
	switch status {
	case http.StatusTooManyRequests:
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		writeAPIError(w, status, fmt.Sprintf("you have reached the maximum number of concurrent E2B sandboxes (%d)", s.opts.MaxSandboxes))
		return
	case http.StatusServiceUnavailable:
		writeJSON(w, status, apiError{Code: status, Message: "service temporarily unavailable", ErrorCode: "sandbox_capacity_unavailable"})
		return
	}

	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.URL.Path == "/sandboxes" && r.Method == http.MethodPost:
		s.apiCreate(w, r)
	case r.URL.Path == "/v2/sandboxes" && r.Method == http.MethodGet:
		s.apiList(w, r)
	case r.URL.Path == "/sandboxes" && r.Method == http.MethodGet:
		s.deviate(r, "GET /sandboxes (v1) is deprecated; use GET /v2/sandboxes")
		s.apiList(w, r)
	case len(parts) == 2 && parts[0] == "sandboxes" && r.Method == http.MethodGet:
		s.apiGet(w, r, parts[1])
	case len(parts) == 2 && parts[0] == "sandboxes" && r.Method == http.MethodDelete:
		s.apiKill(w, r, parts[1])
	case len(parts) == 3 && parts[0] == "sandboxes" && r.Method == http.MethodPost && parts[2] == "timeout":
		s.apiTimeout(w, r, parts[1])
	case len(parts) == 3 && parts[0] == "sandboxes" && r.Method == http.MethodPost && parts[2] == "connect":
		s.apiConnect(w, r, parts[1])
	case len(parts) == 3 && parts[0] == "sandboxes" && r.Method == http.MethodPost && parts[2] == "pause":
		s.apiPause(w, r, parts[1])
	default:
		s.deviate(r, "endpoint not implemented by the fake (or not in the reference)")
		writeAPIError(w, http.StatusNotFound, "Not Found")
	}
}

func sandboxIDFromPath(p string) string {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	if len(parts) >= 2 && parts[0] == "sandboxes" {
		return parts[1]
	}
	return ""
}

type sandboxJSON struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

func (sb *sandbox) json() sandboxJSON {
	return sandboxJSON{TemplateID: sb.templateID, SandboxID: sb.id, Alias: sb.alias, ClientID: clientID, EnvdVersion: EnvdVersion, EnvdAccessToken: sb.token}
}

type lifecycleJSON struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"`
}

type detailJSON struct {
	TemplateID          string            `json:"templateID"`
	Alias               string            `json:"alias,omitempty"`
	SandboxID           string            `json:"sandboxID"`
	ClientID            string            `json:"clientID"`
	StartedAt           string            `json:"startedAt"`
	EndAt               string            `json:"endAt"`
	EnvdVersion         string            `json:"envdVersion"`
	EnvdAccessToken     string            `json:"envdAccessToken,omitempty"`
	AllowInternetAccess *bool             `json:"allowInternetAccess"`
	Domain              *string           `json:"domain"`
	CPUCount            int               `json:"cpuCount"`
	MemoryMB            int               `json:"memoryMB"`
	DiskSizeMB          int               `json:"diskSizeMB"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	State               string            `json:"state"`
	Network             map[string]any    `json:"network,omitempty"`
	Lifecycle           *lifecycleJSON    `json:"lifecycle,omitempty"`
}

// detailLocked renders SandboxDetail (full) or ListedSandbox (listed).
func (sb *sandbox) detailLocked(listed bool) detailJSON {
	d := detailJSON{
		TemplateID: sb.templateID, Alias: sb.alias, SandboxID: sb.id, ClientID: clientID,
		StartedAt: sb.startedAt.Format(time.RFC3339Nano), EndAt: sb.endAt.Format(time.RFC3339Nano),
		EnvdVersion: EnvdVersion, AllowInternetAccess: sb.allowInternet,
		CPUCount: 2, MemoryMB: 512, DiskSizeMB: 512, Metadata: sb.metadata, State: sb.state,
	}
	if !listed {
		d.EnvdAccessToken = sb.token
		d.Network = sb.network
		onTimeout := "kill"
		if sb.autoPause {
			onTimeout = "pause"
		}
		d.Lifecycle = &lifecycleJSON{OnTimeout: onTimeout}
	}
	return d
}

func (s *Server) lookup(id string) *sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sandboxes[id]
}

func notFound(w http.ResponseWriter, id string) {
	writeAPIError(w, http.StatusNotFound, fmt.Sprintf("sandbox %q doesn't exist or you don't have access to it", id))
}

// timeoutArg validates a timeout in seconds.
func (s *Server) timeoutArg(w http.ResponseWriter, raw json.RawMessage, def int64) (time.Duration, bool) {
	t := def
	if raw != nil {
		_ = json.Unmarshal(raw, &t)
	}
	if t <= 0 {
		writeAPIError(w, http.StatusBadRequest, "Timeout must be greater than 0")
		return 0, false
	}
	d := time.Duration(t) * time.Second
	if d > s.opts.MaxTimeout {
		writeAPIError(w, http.StatusBadRequest, fmt.Sprintf("Timeout cannot be greater than %d hours", int(s.opts.MaxTimeout/time.Hour)))
		return 0, false
	}
	return d, true
}

func (s *Server) apiCreate(w http.ResponseWriter, r *http.Request) {
	obj, ok := s.readObject(w, r, newSandboxFields, true)
	if !ok {
		return
	}
	if raw, err := json.Marshal(obj); err == nil {
		s.mu.Lock()
		s.creates = append(s.creates, raw)
		s.mu.Unlock()
	}
	var templateID string
	_ = json.Unmarshal(obj["templateID"], &templateID)
	if templateID == "" {
		s.deviate(r, "templateID is required")
		writeAPIError(w, http.StatusBadRequest, "Request body has an error: doesn't match schema: property \"templateID\" is missing")
		return
	}
	timeout, ok := s.timeoutArg(w, obj["timeout"], 15)
	if !ok {
		return
	}
	secure := false
	if raw, ok := obj["secure"]; ok {
		_ = json.Unmarshal(raw, &secure)
	} else {
		s.deviate(r, "the SDKs always send \"secure\"")
	}
	var network map[string]any
	if raw, ok := obj["network"]; ok {
		_ = json.Unmarshal(raw, &network)
		if v, ok := network["allowPublicTraffic"].(bool); ok && !v && !secure {
			writeAPIError(w, http.StatusBadRequest, "You cannot disable public traffic without enabling secure mode")
			return
		}
	}
	s.mu.Lock()
	n := len(s.sandboxes)
	s.mu.Unlock()
	if n >= s.opts.MaxSandboxes {
		writeAPIError(w, http.StatusTooManyRequests, fmt.Sprintf("you have reached the maximum number of concurrent E2B sandboxes (%d)", s.opts.MaxSandboxes))
		return
	}
	sb, err := s.newSandbox(templateID, secure)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, apiError{Code: 500, Message: "failed to create sandbox", ErrorCode: "sandbox_create_failed"})
		return
	}
	_ = json.Unmarshal(obj["metadata"], &sb.metadata)
	_ = json.Unmarshal(obj["envVars"], &sb.envVars)
	_ = json.Unmarshal(obj["autoPause"], &sb.autoPause)
	if raw, ok := obj["allow_internet_access"]; ok {
		var v bool
		_ = json.Unmarshal(raw, &v)
		sb.allowInternet = &v
	}
	sb.network = network
	s.mu.Lock()
	s.sandboxes[sb.id] = sb
	s.setTimeoutLocked(sb, timeout)
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, sb.json())
}

func (s *Server) apiGet(w http.ResponseWriter, r *http.Request, id string) {
	sb := s.lookup(id)
	if sb == nil {
		notFound(w, id)
		return
	}
	s.mu.Lock()
	d := sb.detailLocked(false)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) apiKill(w http.ResponseWriter, r *http.Request, id string) {
	sb := s.lookup(id)
	if sb == nil || !s.kill(sb) {
		notFound(w, id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) apiTimeout(w http.ResponseWriter, r *http.Request, id string) {
	obj, ok := s.readObject(w, r, map[string]fieldKind{"timeout": kInt}, true)
	if !ok {
		return
	}
	if _, ok := obj["timeout"]; !ok {
		s.deviate(r, "timeout is required")
	}
	d, ok := s.timeoutArg(w, obj["timeout"], 0)
	if !ok {
		return
	}
	sb := s.lookup(id)
	if sb == nil {
		notFound(w, id)
		return
	}
	s.mu.Lock()
	if sb.state == "running" {
		s.setTimeoutLocked(sb, d)
	} else {
		sb.endAt = time.Now().UTC().Add(d)
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) apiConnect(w http.ResponseWriter, r *http.Request, id string) {
	obj, ok := s.readObject(w, r, map[string]fieldKind{"timeout": kInt}, true)
	if !ok {
		return
	}
	if _, ok := obj["timeout"]; !ok {
		s.deviate(r, "timeout is required")
	}
	d, ok := s.timeoutArg(w, obj["timeout"], 0)
	if !ok {
		return
	}
	sb := s.lookup(id)
	if sb == nil {
		writeAPIError(w, http.StatusNotFound, fmt.Sprintf("Paused sandbox %s not found", id))
		return
	}
	s.mu.Lock()
	status := http.StatusOK
	if sb.state == "paused" {
		s.resumeLocked(sb, d)
		status = http.StatusCreated
	} else if time.Now().Add(d).After(sb.endAt) {
		s.setTimeoutLocked(sb, d) // only ever extended
	}
	body := sb.json()
	s.mu.Unlock()
	writeJSON(w, status, body)
}

func (s *Server) apiPause(w http.ResponseWriter, r *http.Request, id string) {
	if _, ok := s.readObject(w, r, map[string]fieldKind{"memory": kBool}, false); !ok {
		return
	}
	sb := s.lookup(id)
	if sb == nil {
		notFound(w, id)
		return
	}
	if !s.pause(sb) {
		writeAPIError(w, http.StatusConflict, fmt.Sprintf("Sandbox %s is already paused", id))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) apiList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	known := map[string]bool{"metadata": true, "state": true, "order": true, "startedAfter": true, "template": true, "limit": true, "nextToken": true}
	for k := range q {
		if !known[k] {
			s.deviate(r, "unknown query parameter %q", k)
		}
	}
	var filter url.Values
	if m := q.Get("metadata"); m != "" {
		var err error
		if filter, err = url.ParseQuery(m); err != nil {
			writeAPIError(w, http.StatusBadRequest, "Error when parsing metadata: "+err.Error())
			return
		}
	}
	states := map[string]bool{}
	if st := q.Get("state"); st != "" {
		for _, v := range strings.Split(st, ",") {
			if v != "running" && v != "paused" {
				s.deviate(r, "bad state %q", v)
				writeAPIError(w, http.StatusBadRequest, fmt.Sprintf("invalid state %q", v))
				return
			}
			states[v] = true
		}
	}
	limit := 100
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			s.deviate(r, "limit %q out of range 1..100", l)
			writeAPIError(w, http.StatusBadRequest, "limit must be between 1 and 100")
			return
		}
		limit = n
	}
	after := ""
	if tok := q.Get("nextToken"); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			writeAPIError(w, http.StatusBadRequest, "Invalid next token")
			return
		}
		after = string(b)
	}
	s.mu.Lock()
	all := make([]*sandbox, 0, len(s.sandboxes))
	running := 0
	for _, sb := range s.sandboxes {
		if sb.state == "running" {
			running++
		}
		if len(states) > 0 && !states[sb.state] {
			continue
		}
		if t := q.Get("template"); t != "" && t != sb.templateID {
			continue
		}
		match := true
		for k, vs := range filter {
			if sb.metadata[k] != vs[0] {
				match = false
			}
		}
		if match {
			all = append(all, sb)
		}
	}
	sort.Slice(all, func(i, j int) bool { return pageKey(all[i]) < pageKey(all[j]) })
	out := []detailJSON{}
	next := ""
	for _, sb := range all {
		if after != "" && pageKey(sb) <= after {
			continue
		}
		if len(out) == limit {
			next = base64.RawURLEncoding.EncodeToString([]byte(pageKey(out[len(out)-1].sb(s))))
			break
		}
		out = append(out, sb.detailLocked(true))
	}
	s.mu.Unlock()
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	w.Header().Set("X-Total-Running", strconv.Itoa(running))
	writeJSON(w, http.StatusOK, out)
}

func pageKey(sb *sandbox) string { return sb.startedAt.Format(time.RFC3339Nano) + "/" + sb.id }

// sb finds the sandbox of a rendered detail (caller holds s.mu).
func (d detailJSON) sb(s *Server) *sandbox { return s.sandboxes[d.SandboxID] }
