package e2bapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

func jetstreamOf(nc *nats.Conn) (jetstream.JetStream, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("e2bapi: jetstream: %w", err)
	}
	return js, nil
}

// metaTemplate keeps the template id in the sandbox's metadata; replies
// leave it out of the user's metadata.
const metaTemplate = "io.sandboxio.e2b.template"

// maxBodyBytes bounds a control-plane request body.
const maxBodyBytes = 1 << 20

// maxTimeoutS is the longest lifetime a create, timeout or connect may ask.
const maxTimeoutS = events.MaxLifetimeSeconds

// newSandbox is E2B's NewSandbox, as the SDKs send it (unknown fields are
// ignored, as newer SDKs add some).
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	AutoPause           *bool             `json:"autoPause"`
	AutoResume          *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	Network *struct {
		AllowPublicTraffic *bool    `json:"allowPublicTraffic"`
		AllowOut           []string `json:"allowOut"`
		DenyOut            []string `json:"denyOut"`
	} `json:"network"`
	VolumeMounts []json.RawMessage `json:"volumeMounts"`
}

// sandboxReply is E2B's Sandbox (create, connect).
type sandboxReply struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// detailReply is E2B's SandboxDetail (get) and, without the token and
// lifecycle, ListedSandbox (list).
type detailReply struct {
	TemplateID          string            `json:"templateID"`
	SandboxID           string            `json:"sandboxID"`
	ClientID            string            `json:"clientID"`
	StartedAt           string            `json:"startedAt"`
	EndAt               string            `json:"endAt"`
	EnvdVersion         string            `json:"envdVersion"`
	EnvdAccessToken     string            `json:"envdAccessToken,omitempty"`
	AllowInternetAccess *bool             `json:"allowInternetAccess,omitempty"`
	Domain              *string           `json:"domain"`
	CPUCount            int               `json:"cpuCount"`
	MemoryMB            int               `json:"memoryMB"`
	DiskSizeMB          int               `json:"diskSizeMB"`
	Metadata            map[string]string `json:"metadata"`
	State               string            `json:"state"`
	Lifecycle           *lifecycle        `json:"lifecycle,omitempty"`
}

type lifecycle struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"`
}

// listedReply is E2B's ListedSandbox: a SandboxDetail without token,
// network, lifecycle, domain and internet access.
type listedReply struct {
	TemplateID  string            `json:"templateID"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	StartedAt   string            `json:"startedAt"`
	EndAt       string            `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata"`
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
}

func listed(d detailReply) listedReply {
	return listedReply{TemplateID: d.TemplateID, SandboxID: d.SandboxID, ClientID: d.ClientID, StartedAt: d.StartedAt,
		EndAt: d.EndAt, CPUCount: d.CPUCount, MemoryMB: d.MemoryMB, DiskSizeMB: d.DiskSizeMB, Metadata: d.Metadata,
		State: d.State, EnvdVersion: d.EnvdVersion}
}

// serveControl is the REST control plane.
func (a *API) serveControl(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	if path == "/health" && r.Method == http.MethodGet {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	v2 := len(parts) > 0 && parts[0] == "v2"
	if v2 {
		parts = parts[1:]
	}
	if len(parts) == 0 || parts[0] != "sandboxes" {
		a.notFoundRoute(w, r)
		return
	}
	rec, ok := a.tenantOf(w, r)
	if !ok {
		return
	}
	cl, err := a.clientFor(rec.Tenant)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal error")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.RequestTimeout)
	defer cancel()
	switch {
	case len(parts) == 1 && r.Method == http.MethodPost:
		a.create(ctx, w, r, cl, rec.Tenant)
	case len(parts) == 1 && r.Method == http.MethodGet:
		a.list(ctx, w, r, cl, v2)
	case len(parts) == 2 && parts[1] == "metrics" && r.Method == http.MethodGet:
		writeError(w, http.StatusNotImplemented, "sandbox metrics are not supported by this server")
	case len(parts) == 2 && r.Method == http.MethodGet && !v2:
		a.get(ctx, w, cl, parts[1], rec.Tenant)
	case len(parts) == 2 && r.Method == http.MethodDelete && !v2:
		a.kill(ctx, w, cl, parts[1])
	case len(parts) == 3 && r.Method == http.MethodPost && (!v2 || parts[2] == "connect"):
		a.sandboxAction(ctx, w, r, cl, parts[1], parts[2], rec.Tenant)
	case len(parts) == 3 && parts[2] == "logs" && r.Method == http.MethodGet:
		writeError(w, http.StatusNotImplemented, "sandbox logs are not supported by this server")
	default:
		a.notFoundRoute(w, r)
	}
}

func (a *API) notFoundRoute(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, "no route %s %s on this server", truncate(r.Method, 16), truncate(r.URL.Path, 128))
}

// decodeBody reads a bounded JSON body into v; a body that is not JSON is
// 400, as E2B answers.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, required bool) bool {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "request body larger than %d bytes", maxBodyBytes)
		return false
	}
	if len(strings.TrimSpace(string(raw))) == 0 {
		if required {
			writeError(w, http.StatusBadRequest, "request body is required")
			return false
		}
		return true
	}
	if err := json.Unmarshal(raw, v); err != nil {
		writeError(w, http.StatusBadRequest, "error when parsing request: %s", jsonProblem(err))
		return false
	}
	return true
}

// jsonProblem says what is wrong with a body without echoing it.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q must be %s", te.Field, te.Type)
	}
	return "malformed JSON"
}

func (a *API) create(ctx context.Context, w http.ResponseWriter, r *http.Request, cl *client.Client, tenant string) {
	var ns newSandbox
	if !decodeBody(w, r, &ns, true) {
		return
	}
	if ns.TemplateID == "" {
		writeError(w, http.StatusBadRequest, "templateID is required")
		return
	}
	tpl, ok := a.cfg.Templates[ns.TemplateID]
	if !ok {
		writeError(w, http.StatusBadRequest, "template '%s' not found on this server", truncate(ns.TemplateID, 64))
		return
	}
	timeout := int64(15)
	if ns.Timeout != nil {
		timeout = *ns.Timeout
	}
	switch {
	case timeout <= 0:
		writeError(w, http.StatusBadRequest, "Timeout must be greater than 0")
		return
	case timeout > maxTimeoutS:
		writeError(w, http.StatusBadRequest, "Timeout cannot be greater than %d hours", maxTimeoutS/3600)
		return
	}
	switch {
	case ns.AutoPause != nil && *ns.AutoPause, ns.AutoResume != nil && ns.AutoResume.Enabled:
		writeError(w, http.StatusBadRequest, "auto-pause and auto-resume are not supported by this server")
		return
	case len(ns.VolumeMounts) > 0:
		writeError(w, http.StatusBadRequest, "volume mounts are not supported by this server")
		return
	case ns.Network != nil && len(ns.Network.DenyOut) > 0:
		writeError(w, http.StatusBadRequest, "network.denyOut is not supported by this server; use allowOut")
		return
	}
	if _, ok := ns.Metadata[metaTemplate]; ok {
		writeError(w, http.StatusBadRequest, "metadata key %s is reserved", metaTemplate)
		return
	}
	net := &events.NetworkPolicy{Egress: events.EgressAllow}
	switch {
	case ns.Network != nil && len(ns.Network.AllowOut) > 0:
		net.Allow = ns.Network.AllowOut
	case ns.AllowInternetAccess != nil && !*ns.AllowInternetAccess:
		net = &events.NetworkPolicy{Egress: events.EgressDeny}
	}
	meta := make(map[string]string, len(ns.Metadata)+1)
	for k, v := range ns.Metadata {
		meta[k] = v
	}
	meta[metaTemplate] = ns.TemplateID
	req := events.CreateRequest{Class: tpl.Class, DSN: tpl.DSN, TimeoutS: int(timeout), Network: net,
		Env: ns.EnvVars, Metadata: meta}
	sb, err := cl.Create(ctx, req)
	if err != nil {
		a.replyErr(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, a.sandboxReply(sb.SandboxID, ns.TemplateID, tenant))
}

func (a *API) sandboxReply(id, template, tenant string) sandboxReply {
	tok := a.accessToken(id, tenant)
	// The traffic token is the same: the code interpreter's clients send it
	// (E2B-Traffic-Access-Token) where they send no access token.
	return sandboxReply{TemplateID: template, SandboxID: id, ClientID: clientID, EnvdVersion: a.cfg.EnvdVersion,
		EnvdAccessToken: tok, TrafficAccessToken: &tok, Domain: a.domain()}
}

func (a *API) domain() *string {
	if a.cfg.Domain == "" {
		return nil
	}
	d := a.cfg.Domain
	return &d
}

// replyErr answers a sandboxio error with E2B's status and body.
func (a *API) replyErr(w http.ResponseWriter, err error) {
	status := statusOf(err)
	if status == http.StatusNotFound {
		writeError(w, status, "sandbox not found")
		return
	}
	if status == http.StatusInternalServerError {
		a.log.Warn("request failed", slog.Any("err", err))
	}
	writeError(w, status, "%s", messageOf(err))
}

// lookup gets a live sandbox of the caller's; ended ones are not found.
func lookup(ctx context.Context, cl *client.Client, id string) (*events.Sandbox, error) {
	if !events.ValidID(id) {
		return nil, events.Errorf(events.CodeSandboxNotFound, "not a sandbox id")
	}
	sb, err := cl.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !live(sb.State) {
		return nil, events.Errorf(events.CodeSandboxNotFound, "sandbox ended")
	}
	return sb, nil
}

func live(s events.State) bool { return s == events.StateRunning || s == events.StateCreating }

// lookupAny gets a sandbox of the caller's that is live or paused.
func lookupAny(ctx context.Context, cl *client.Client, id string) (*events.Sandbox, error) {
	if !events.ValidID(id) {
		return nil, events.Errorf(events.CodeSandboxNotFound, "not a sandbox id")
	}
	sb, err := cl.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !live(sb.State) && sb.State != events.StatePaused {
		return nil, events.Errorf(events.CodeSandboxNotFound, "sandbox ended")
	}
	return sb, nil
}

// stateOf is E2B's state of a sandbox: running or paused.
func stateOf(s events.State) string {
	if s == events.StatePaused {
		return "paused"
	}
	return "running"
}

func (a *API) detail(sb *events.Sandbox, withToken bool) detailReply {
	tplID := sb.Metadata[metaTemplate]
	tpl := a.cfg.Templates[tplID]
	if tplID == "" {
		tplID = sb.Class
	}
	meta := map[string]string{}
	for k, v := range sb.Metadata {
		if k != metaTemplate {
			meta[k] = v
		}
	}
	started := sb.CreatedAt
	if sb.StartedAt != nil {
		started = *sb.StartedAt
	}
	d := detailReply{TemplateID: tplID, SandboxID: sb.SandboxID, ClientID: clientID,
		StartedAt: started.UTC().Format(time.RFC3339Nano), EndAt: sb.Deadline.UTC().Format(time.RFC3339Nano),
		EnvdVersion: a.cfg.EnvdVersion, Domain: a.domain(), CPUCount: max(tpl.CPUCount, 1),
		MemoryMB: max(tpl.MemoryMB, 128), DiskSizeMB: max(tpl.DiskSizeMB, 512), Metadata: meta, State: stateOf(sb.State)}
	if sb.Network != nil {
		allowed := sb.Network.EgressAllowed()
		d.AllowInternetAccess = &allowed
	}
	if withToken {
		d.EnvdAccessToken = a.accessToken(sb.SandboxID, sb.Tenant)
		d.Lifecycle = &lifecycle{OnTimeout: "kill"}
	}
	return d
}

func (a *API) get(ctx context.Context, w http.ResponseWriter, cl *client.Client, id, tenant string) {
	sb, err := lookupAny(ctx, cl, id)
	if err != nil {
		a.replyErr(w, err)
		return
	}
	if sb.Tenant != tenant {
		// The router answered a sandbox that is not the key's tenant's:
		// never shown.
		writeError(w, http.StatusNotFound, "sandbox not found")
		return
	}
	writeJSON(w, http.StatusOK, a.detail(sb, true))
}

func (a *API) kill(ctx context.Context, w http.ResponseWriter, cl *client.Client, id string) {
	if _, err := lookupAny(ctx, cl, id); err != nil {
		a.replyErr(w, err)
		return
	}
	if _, err := cl.Kill(ctx, id); err != nil {
		a.replyErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// sandboxAction serves POST /sandboxes/{id}/{timeout,refreshes,connect,…}.
func (a *API) sandboxAction(ctx context.Context, w http.ResponseWriter, r *http.Request, cl *client.Client, id, action, tenant string) {
	switch action {
	case "timeout", "refreshes", "connect", "resume":
	case "pause":
		a.pause(ctx, w, r, cl, id)
		return
	case "snapshots", "fork":
		writeError(w, http.StatusNotImplemented, "%s is not supported by this server", action)
		return
	default:
		a.notFoundRoute(w, r)
		return
	}
	var body struct {
		Timeout  *int64 `json:"timeout"`
		Duration *int64 `json:"duration"`
	}
	if !decodeBody(w, r, &body, action != "refreshes") {
		return
	}
	sb, err := lookupAny(ctx, cl, id)
	if err != nil {
		a.replyErr(w, err)
		return
	}
	secs := body.Timeout
	if action == "refreshes" {
		secs = body.Duration
		if secs == nil {
			d := int64(0)
			secs = &d
		}
	}
	if secs == nil {
		writeError(w, http.StatusBadRequest, "timeout is required")
		return
	}
	switch {
	case *secs < 0 || (*secs == 0 && action != "refreshes"):
		writeError(w, http.StatusBadRequest, "Timeout must be greater than 0")
		return
	case *secs > maxTimeoutS || (action == "refreshes" && *secs > 3600):
		writeError(w, http.StatusBadRequest, "Timeout cannot be greater than %d seconds", min(maxTimeoutS, map[bool]int{true: 3600, false: maxTimeoutS}[action == "refreshes"]))
		return
	}
	want := time.Duration(*secs) * time.Second
	if sb.State == events.StatePaused {
		if action != "connect" && action != "resume" {
			writeError(w, http.StatusConflict, "sandbox %s is paused", id)
			return
		}
		// A paused sandbox resumes: 201, as E2B answers a resumed one.
		if _, err := cl.Resume(ctx, id, want); err != nil {
			a.replyErr(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, a.sandboxReply(id, a.detail(sb, false).TemplateID, tenant))
		return
	}
	if action == "resume" {
		writeError(w, http.StatusConflict, "sandbox %s is already running", id)
		return
	}
	// timeout sets the deadline; refreshes and connect only extend it.
	if action == "timeout" || time.Now().Add(want).After(sb.Deadline) {
		if _, err := cl.SetTimeout(ctx, id, want); err != nil {
			a.replyErr(w, err)
			return
		}
	}
	switch action {
	case "connect":
		writeJSON(w, http.StatusOK, a.sandboxReply(id, a.detail(sb, false).TemplateID, tenant))
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// pause keeps the sandbox's files in a snapshot and frees its container
// (sandboxio's pause: files only, its processes end). 409 when it is
// already paused, as E2B answers.
func (a *API) pause(ctx context.Context, w http.ResponseWriter, r *http.Request, cl *client.Client, id string) {
	var body struct {
		Memory *bool `json:"memory"`
	}
	if !decodeBody(w, r, &body, false) {
		return
	}
	sb, err := lookupAny(ctx, cl, id)
	if err != nil {
		a.replyErr(w, err)
		return
	}
	if sb.State == events.StatePaused {
		writeError(w, http.StatusConflict, "sandbox %s is already paused", id)
		return
	}
	if _, err := cl.Pause(ctx, id); err != nil {
		if errors.Is(err, events.ErrSandboxPaused) {
			writeError(w, http.StatusConflict, "sandbox %s is already paused", id)
			return
		}
		a.replyErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listToken is the paging cursor: the last sandbox's start and id.
type listToken struct {
	At int64  `json:"t"`
	ID string `json:"i"`
}

func (a *API) list(ctx context.Context, w http.ResponseWriter, r *http.Request, cl *client.Client, v2 bool) {
	q := r.URL.Query()
	req := events.ListRequest{Limit: events.MaxListLimit}
	if m := q.Get("metadata"); m != "" {
		vals, err := url.ParseQuery(m)
		if err != nil {
			writeError(w, http.StatusBadRequest, "metadata: not a query string")
			return
		}
		req.Metadata = map[string]string{}
		for k, vs := range vals {
			if k == metaTemplate {
				continue
			}
			req.Metadata[k] = vs[len(vs)-1]
		}
	}
	running, paused := true, false
	if states := strings.Join(q["state"], ","); states != "" && v2 {
		running = false
		// Comma-joined (form style), or the parameter repeated.
		for _, st := range strings.Split(states, ",") {
			switch st {
			case "running":
				running = true
			case "paused":
				paused = true
			default:
				writeError(w, http.StatusBadRequest, "state %q: want running or paused", truncate(st, 32))
				return
			}
		}
	}
	limit := 100
	if l := q.Get("limit"); l != "" && v2 {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			writeError(w, http.StatusBadRequest, "limit must be 1..100")
			return
		}
		limit = n
	}
	var after *listToken
	if t := q.Get("nextToken"); t != "" && v2 {
		raw, err := base64.RawURLEncoding.DecodeString(t)
		var lt listToken
		if err != nil || json.Unmarshal(raw, &lt) != nil {
			writeError(w, http.StatusBadRequest, "nextToken is not valid")
			return
		}
		after = &lt
	}
	desc := q.Get("order") != "asc"
	out := []listedReply{}
	if running || paused {
		list, err := cl.List(ctx, req)
		if err != nil {
			a.replyErr(w, err)
			return
		}
		type item struct {
			at int64
			sb *events.Sandbox
		}
		items := make([]item, 0, len(list))
		for i := range list {
			sb := &list[i]
			if !(running && live(sb.State)) && !(paused && sb.State == events.StatePaused) {
				continue
			}
			if tplFilter := q.Get("template"); tplFilter != "" && sb.Metadata[metaTemplate] != tplFilter {
				continue
			}
			at := sb.CreatedAt
			if sb.StartedAt != nil {
				at = *sb.StartedAt
			}
			if sa := q.Get("startedAfter"); sa != "" {
				if t, err := time.Parse(time.RFC3339, sa); err == nil && !at.After(t) {
					continue
				}
			}
			items = append(items, item{at.UnixNano(), sb})
		}
		less := func(x, y item) bool {
			if x.at != y.at {
				return (x.at < y.at) != desc
			}
			if x.sb.SandboxID == y.sb.SandboxID {
				return false
			}
			return (x.sb.SandboxID < y.sb.SandboxID) != desc
		}
		sort.Slice(items, func(i, j int) bool { return less(items[i], items[j]) })
		w.Header().Set("X-Total-Running", strconv.Itoa(len(items)))
		if after != nil {
			cut := item{after.At, &events.Sandbox{SandboxID: after.ID}}
			i := sort.Search(len(items), func(i int) bool { return less(cut, items[i]) })
			items = items[i:]
		}
		if !v2 {
			limit = math.MaxInt
		}
		if len(items) > limit {
			last := items[limit-1]
			b, _ := json.Marshal(listToken{At: last.at, ID: last.sb.SandboxID})
			w.Header().Set("X-Next-Token", base64.RawURLEncoding.EncodeToString(b))
			items = items[:limit]
		}
		for _, it := range items {
			out = append(out, listed(a.detail(it.sb, false)))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
