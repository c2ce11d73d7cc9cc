package modalworker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/backendkit"
	pb "github.com/sandboxio/sandboxio/services/modal-worker/internal/gen/modalclient"
	"github.com/sandboxio/sandboxio/services/modal-worker/internal/modalapi"
)

// Tags set on every Modal sandbox the backend creates (Modal's tags are the
// counterpart of Docker labels). Keys and values keep to
// [a-zA-Z0-9._-]{1,63}, the rule Modal's SDK applies to app tags.
const (
	TagSandbox  = "sandboxio.sandbox"
	TagWorker   = "sandboxio.worker"
	TagDeadline = "sandboxio.deadline" // unix seconds
	TagOwner    = "sandboxio.owner"
	TagClass    = "sandboxio.class"
)

// MaxLifetime is the longest lifetime Modal gives a sandbox (24 h).
const MaxLifetime = 24 * time.Hour

var (
	tagRule     = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,63}$`)
	appNameRule = regexp.MustCompile(`^[a-zA-Z0-9\-_.]{1,64}$`)
)

// Backend runs sandboxes on Modal. Create it with NewBackend.
type Backend struct {
	cfg Config
	log *slog.Logger
	api *modalapi.Client

	boxes backendkit.Handles[*box] // by sandboxio id

	mu             sync.Mutex
	appID          string
	builderVersion string

	wg        sync.WaitGroup // stdin pumps, cleanups
	stop      chan struct{}
	closeOnce sync.Once
}

// box is what the backend knows of one Modal sandbox.
type box struct {
	id      string // sandboxio id
	modalID string
	router  *modalapi.Router
}

var (
	_ worker.Backend       = (*Backend)(nil)
	_ worker.FileSystem    = (*Backend)(nil)
	_ worker.TimeoutSetter = (*Backend)(nil)
	_ worker.Lister        = (*Backend)(nil)
)

// NewBackend returns a Backend. It fails when the tokens are missing or
// rejected (it fetches an auth token; nothing is created until the first
// sandbox); other failures of that check are only logged, so a worker can
// start while Modal has a hiccup.
func NewBackend(ctx context.Context, cfg Config) (*Backend, error) {
	cfg = cfg.withDefaults()
	if !events.ValidID(cfg.WorkerID) {
		return nil, fmt.Errorf("modalworker: worker id %q is not a valid id", cfg.WorkerID)
	}
	if !tagRule.MatchString(cfg.WorkerID) {
		return nil, fmt.Errorf("modalworker: worker id %q cannot be a Modal tag value", cfg.WorkerID)
	}
	if !appNameRule.MatchString(cfg.App) || strings.HasPrefix(cfg.App, "ap-") {
		return nil, fmt.Errorf("modalworker: %s %q is not a valid Modal app name ([a-zA-Z0-9-_.], at most 64)", EnvApp, cfg.App)
	}
	log := cfg.Logger.With("service", "modal-worker", "worker_id", cfg.WorkerID)
	mc := cfg.Modal
	if mc.Logger == nil {
		mc.Logger = log
	}
	api, err := modalapi.New(mc)
	if err != nil {
		return nil, fmt.Errorf("modalworker: %w", err)
	}
	b := &Backend{cfg: cfg, log: log, api: api, stop: make(chan struct{})}
	pctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	if err := api.CheckAuth(pctx); err != nil {
		if isCode(err, codes.Unauthenticated) || isCode(err, codes.PermissionDenied) {
			_ = api.Close()
			return nil, fmt.Errorf("modalworker: Modal at %s rejected the token (%s / %s or the profile file): %s",
				mc.ServerURL, modalapi.EnvTokenID, modalapi.EnvTokenSecret, grpcMessage(err))
		}
		log.Warn("modal api check failed", slog.String("err", grpcMessage(err)))
	}
	log.Info("modal backend ready", slog.Any("modal", mc), "app", cfg.App, "image", cfg.Image)
	return b, nil
}

// Close stops background work and closes the connections. It does not
// terminate sandboxes: the worker runtime does that when asked to.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() { close(b.stop) })
	b.wg.Wait()
	for _, bx := range b.boxes.TakeAll() {
		_ = bx.router.Close()
	}
	return b.api.Close()
}

// Info implements worker.Backend. No set_timeout (Modal cannot change a
// sandbox's lifetime) and no signal (Modal has no signal RPC).
func (b *Backend) Info() worker.Info {
	return worker.Info{Name: "modal", Isolation: events.TierGVisor, Capabilities: events.Capabilities{
		events.CapExec, events.CapStream, events.CapFiles, events.CapStdin, events.CapNetworkAllowlist,
	}}
}

// ModalSandboxID returns the Modal sandbox id behind a sandboxio sandbox
// this backend holds (for operators and tests).
func (b *Backend) ModalSandboxID(sandboxID string) (string, bool) {
	bx, ok := b.boxes.Get(sandboxID)
	if !ok {
		return "", false
	}
	return bx.modalID, true
}

// app returns the app id, creating the app on first use.
func (b *Backend) app(ctx context.Context) (string, error) {
	b.mu.Lock()
	id := b.appID
	b.mu.Unlock()
	if id != "" {
		return id, nil
	}
	resp, err := b.api.API().AppGetOrCreate(ctx, &pb.AppGetOrCreateRequest{AppName: b.cfg.App, EnvironmentName: b.cfg.Modal.Environment,
		ObjectCreationType: pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING})
	if err != nil {
		return "", err
	}
	b.mu.Lock()
	b.appID = resp.GetAppId()
	b.mu.Unlock()
	return resp.GetAppId(), nil
}

// imageBuilderVersion is MODAL_IMAGE_BUILDER_VERSION or the environment's.
func (b *Backend) imageBuilderVersion(ctx context.Context) (string, error) {
	if v := b.cfg.Modal.ImageBuilderVersion; v != "" {
		return v, nil
	}
	b.mu.Lock()
	v := b.builderVersion
	b.mu.Unlock()
	if v != "" {
		return v, nil
	}
	resp, err := b.api.API().EnvironmentGetOrCreate(ctx, &pb.EnvironmentGetOrCreateRequest{DeploymentName: b.cfg.Modal.Environment})
	if err != nil {
		return "", err
	}
	v = resp.GetMetadata().GetSettings().GetImageBuilderVersion()
	if v == "" {
		return "", errors.New("modalworker: the environment reports no image builder version")
	}
	b.mu.Lock()
	b.builderVersion = v
	b.mu.Unlock()
	return v, nil
}

// image gets or builds the image of a registry tag and waits for its build.
func (b *Backend) image(ctx context.Context, appID, tag string) (string, error) {
	bv, err := b.imageBuilderVersion(ctx)
	if err != nil {
		return "", sbxError(err, "image builder version")
	}
	resp, err := b.api.API().ImageGetOrCreate(ctx, &pb.ImageGetOrCreateRequest{AppId: appID, BuilderVersion: bv,
		Image: &pb.Image{DockerfileCommands: []string{"FROM " + tag}}})
	if err != nil {
		return "", sbxError(err, "get image "+tag)
	}
	id, res := resp.GetImageId(), resp.GetResult()
	last := ""
	for res == nil || res.GetStatus() == pb.GenericResult_GENERIC_STATUS_UNSPECIFIED {
		stream, err := b.api.API().ImageJoinStreaming(ctx, &pb.ImageJoinStreamingRequest{ImageId: id, Timeout: 55, LastEntryId: last})
		if err != nil {
			return "", sbxError(err, "join image build")
		}
		for {
			m, err := stream.Recv()
			if err != nil {
				if ctx.Err() != nil {
					return "", ctx.Err()
				}
				if isCode(err, codes.Unavailable) || errors.Is(err, io.EOF) {
					break // reconnect from the last entry
				}
				return "", sbxError(err, "join image build")
			}
			if m.GetEntryId() != "" {
				last = m.GetEntryId()
			}
			if r := m.GetResult(); r != nil && r.GetStatus() != pb.GenericResult_GENERIC_STATUS_UNSPECIFIED {
				res = r
				break
			}
		}
	}
	switch res.GetStatus() {
	case pb.GenericResult_GENERIC_STATUS_SUCCESS:
		return id, nil
	case pb.GenericResult_GENERIC_STATUS_FAILURE:
		return "", events.Errorf(events.CodeImageNotFound, "Modal could not build image %s from %q: %s", id, tag, res.GetException()).With("image", tag)
	case pb.GenericResult_GENERIC_STATUS_TIMEOUT:
		return "", events.Errorf(events.CodeCreateFailed, "Modal's build of image %q timed out", tag)
	}
	return "", events.Errorf(events.CodeCreateFailed, "Modal's build of image %q ended with status %s: %s", tag, res.GetStatus(), res.GetException())
}

// ceilSeconds rounds a lifetime up to whole seconds (at least 1): Modal
// takes whole seconds.
func ceilSeconds(d time.Duration) uint32 {
	s := math.Ceil(d.Seconds())
	if s < 1 {
		s = 1
	}
	return uint32(s)
}

// networkFor maps a network policy onto Modal's network_access:
//   - deny (default): BLOCKED ("drops all outbound traffic");
//   - allow with no list: OPEN;
//   - allow with a list: ALLOWLIST with the IPs and CIDRs in allowed_cidrs
//     (any protocol) and the host names in allowed_domains (Modal: TLS on
//     port 443 only, matched by SNI).
func networkFor(p events.NetworkPolicy) *pb.NetworkAccess {
	if !p.EgressAllowed() {
		return &pb.NetworkAccess{NetworkAccessType: pb.NetworkAccessType_NETWORK_ACCESS_TYPE_BLOCKED}
	}
	if len(p.Allow) == 0 {
		return &pb.NetworkAccess{NetworkAccessType: pb.NetworkAccessType_NETWORK_ACCESS_TYPE_OPEN}
	}
	na := &pb.NetworkAccess{NetworkAccessType: pb.NetworkAccessType_NETWORK_ACCESS_TYPE_ALLOWLIST}
	for _, h := range p.Allow {
		switch ip := net.ParseIP(h); {
		case ip != nil && ip.To4() != nil:
			na.AllowedCidrs = append(na.AllowedCidrs, h+"/32")
		case ip != nil:
			na.AllowedCidrs = append(na.AllowedCidrs, h+"/128")
		case strings.Contains(h, "/"):
			na.AllowedCidrs = append(na.AllowedCidrs, h)
		default:
			na.AllowedDomains = append(na.AllowedDomains, h)
		}
	}
	return na
}

// resourcesFor maps requested resources. sandboxio counts CPUs as vCPUs;
// Modal's cpu is physical cores (1 core = 2 vCPU), so milli_cpu is 500 per
// vCPU, at least Modal's 0.125 core. Disk is refused before (checkSpec).
func resourcesFor(r events.Resources) (*pb.Resources, []string) {
	var warnings []string
	if r.PIDs > 0 {
		warnings = append(warnings, "Modal has no process limit; pids was not applied")
	}
	if r.CPUs == 0 && r.MemoryMB == 0 {
		return nil, warnings
	}
	res := &pb.Resources{MemoryMb: uint32(max(r.MemoryMB, 0))}
	if r.CPUs > 0 {
		res.MilliCpu = uint32(max(math.Round(r.CPUs*500), 125))
		res.MilliCpuMax = res.MilliCpu
	}
	if res.MemoryMb > 0 {
		res.MemoryMbMax = res.MemoryMb
	}
	return res, warnings
}

// SandboxTag is the value of the sandboxio.sandbox tag of a sandbox: its id,
// or, for an id longer than a tag value may be (63), its first 50
// characters, "-" and 12 hex digits of its SHA-256. The full id is the
// Modal sandbox's name (up to 64 characters).
func SandboxTag(sandboxID string) string {
	if len(sandboxID) <= maxTagLen {
		return sandboxID
	}
	sum := sha256.Sum256([]byte(sandboxID))
	return sandboxID[:maxTagLen-13] + "-" + hex.EncodeToString(sum[:])[:12]
}

// maxTagLen is the longest tag value Modal takes.
const maxTagLen = 63

// tagsFor builds the tags of a sandbox. Secrets never go there; values that
// Modal would refuse as tags are left out.
func tagsFor(spec worker.CreateSpec) []*pb.SandboxTag {
	tags := []*pb.SandboxTag{
		{TagName: TagSandbox, TagValue: SandboxTag(spec.SandboxID)},
		{TagName: TagWorker, TagValue: spec.WorkerID},
		{TagName: TagDeadline, TagValue: strconv.FormatInt(spec.Deadline.Unix(), 10)},
	}
	if tagRule.MatchString(spec.Owner) {
		tags = append(tags, &pb.SandboxTag{TagName: TagOwner, TagValue: spec.Owner})
	}
	if tagRule.MatchString(spec.Spec.Name) {
		tags = append(tags, &pb.SandboxTag{TagName: TagClass, TagValue: spec.Spec.Name})
	}
	return tags
}

// Create implements worker.Backend: app, image and (for env and secrets)
// an ephemeral Secret, then SandboxCreate with the sandbox's full lifetime,
// then the task and its router.
func (b *Backend) Create(ctx context.Context, spec worker.CreateSpec) (worker.Created, error) {
	tag := spec.Spec.Image
	if tag == "" {
		tag = b.cfg.Image
	}
	if spec.Resources.DiskMB > 0 {
		// Modal's SDKs send no ephemeral_disk_mb for a sandbox: "Ephemeral
		// disk requests not supported on Sandboxes".
		return worker.Created{}, events.Errorf(events.CodeCapabilityNotSupp, "Modal sandboxes take no disk size; leave disk_mb unset on Modal").With("field", "resources.disk_mb")
	}
	left := time.Until(spec.Deadline)
	if left <= 0 {
		return worker.Created{}, events.Errorf(events.CodeInvalidValue, "the sandbox deadline has already passed").With("field", "timeout_s")
	}
	if left > MaxLifetime+time.Second {
		return worker.Created{}, events.Errorf(events.CodeInvalidValue, "Modal sandboxes live at most 24 h; %s was asked", left.Round(time.Second)).With("field", "timeout_s")
	}
	appID, err := b.app(ctx)
	if err != nil {
		return worker.Created{}, createError(ctx, err, "get app")
	}
	imageID, err := b.image(ctx, appID, tag)
	if err != nil {
		return worker.Created{}, createError(ctx, err, "image")
	}
	var secretIDs []string
	if env := mergeEnv(spec.Env, spec.Secrets); len(env) > 0 {
		resp, err := b.api.API().SecretGetOrCreate(ctx, &pb.SecretGetOrCreateRequest{EnvironmentName: b.cfg.Modal.Environment,
			ObjectCreationType: pb.ObjectCreationType_OBJECT_CREATION_TYPE_EPHEMERAL, EnvDict: env, AppId: appID})
		if err != nil {
			return worker.Created{}, createError(ctx, err, "create secret")
		}
		secretIDs = []string{resp.GetSecretId()}
	}
	res, warnings := resourcesFor(spec.Resources)
	name := spec.SandboxID
	def := &pb.Sandbox{
		ImageId: imageID, SecretIds: secretIDs, Resources: res, TimeoutSecs: ceilSeconds(left),
		NetworkAccess: networkFor(spec.Network), OpenPortsOneof: &pb.Sandbox_OpenPorts{OpenPorts: &pb.PortSpecs{}}, Name: &name,
	}
	if def.Resources == nil {
		def.Resources = &pb.Resources{}
	}
	def.Resources.GpuConfig = &pb.GPUConfig{} // as the Go SDK: always sent, empty without a GPU
	resp, err := b.api.API().SandboxCreate(ctx, &pb.SandboxCreateRequest{AppId: appID, Definition: def, Tags: tagsFor(spec)})
	var modalID string
	switch {
	case err == nil:
		modalID = resp.GetSandboxId()
	case isCode(err, codes.AlreadyExists):
		// An earlier attempt of this create (a redelivery) made it.
		found, ferr := b.find(ctx, spec.SandboxID)
		if ferr != nil || len(found) == 0 {
			return worker.Created{}, createError(ctx, err, "create sandbox")
		}
		modalID = found[0].GetId()
	default:
		if ctx.Err() != nil || !isCode(err, codes.InvalidArgument) && !isCode(err, codes.Unauthenticated) && !isCode(err, codes.NotFound) {
			// The request may have reached Modal: nothing may be left behind.
			b.cleanupAfterCreate(spec.SandboxID)
		}
		return worker.Created{}, createError(ctx, err, "create sandbox")
	}
	bx, err := b.attach(ctx, spec.SandboxID, modalID)
	if err != nil {
		b.terminate(context.WithoutCancel(ctx), modalID)
		return worker.Created{}, createError(ctx, err, "start sandbox")
	}
	b.boxes.Put(spec.SandboxID, bx)
	b.log.Info("sandbox created", "sandbox_id", spec.SandboxID, "modal_sandbox_id", modalID, "image", tag,
		"egress", spec.Network.Egress, "allow_count", len(spec.Network.Allow), "timeout_secs", def.GetTimeoutSecs())
	return worker.Created{Image: "modal:" + tag, Warnings: warnings}, nil
}

func mergeEnv(env, secrets map[string]string) map[string]string {
	out := make(map[string]string, len(env)+len(secrets))
	for k, v := range env {
		out[k] = v
	}
	for k, v := range secrets {
		out[k] = v
	}
	return out
}

// attach waits for the sandbox's task to be scheduled and opens its router.
func (b *Backend) attach(ctx context.Context, id, modalID string) (*box, error) {
	t := time.NewTicker(b.cfg.PollInterval)
	defer t.Stop()
	for {
		resp, err := b.api.API().SandboxGetTaskId(ctx, &pb.SandboxGetTaskIdRequest{SandboxId: modalID})
		if err != nil {
			return nil, err
		}
		if r := resp.GetTaskResult(); r != nil {
			return nil, events.Errorf(events.CodeSandboxGone, "Modal sandbox %s has already completed: %s %s", modalID, r.GetStatus(), r.GetException())
		}
		if task := resp.GetTaskId(); task != "" {
			router, err := b.api.OpenRouter(ctx, task)
			if err != nil {
				return nil, err
			}
			return &box{id: id, modalID: modalID, router: router}, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// find lists the running Modal sandboxes of a sandboxio id: tagged with
// SandboxTag(id) and, when they carry a name, named id (a shortened tag is
// not unique).
func (b *Backend) find(ctx context.Context, sandboxID string) ([]*pb.SandboxInfo, error) {
	all, err := b.list(ctx, []*pb.SandboxTag{{TagName: TagSandbox, TagValue: SandboxTag(sandboxID)}})
	out := all[:0]
	for _, sb := range all {
		if sandboxIDOf(sb) == sandboxID {
			out = append(out, sb)
		}
	}
	return out, err
}

// sandboxIDOf is the sandboxio id of a Modal sandbox: its name when it has
// a valid one, else its sandboxio.sandbox tag.
func sandboxIDOf(sb *pb.SandboxInfo) string {
	if n := sb.GetName(); events.ValidID(n) {
		return n
	}
	return tagValue(sb.GetTags(), TagSandbox)
}

// list pages through SandboxList (newest first, before_timestamp paging).
func (b *Backend) list(ctx context.Context, tags []*pb.SandboxTag) ([]*pb.SandboxInfo, error) {
	appID, err := b.app(ctx)
	if err != nil {
		return nil, err
	}
	var out []*pb.SandboxInfo
	before := 0.0
	for page := 0; page < 10000; page++ {
		resp, err := b.api.API().SandboxList(ctx, &pb.SandboxListRequest{AppId: appID, EnvironmentName: b.cfg.Modal.Environment, Tags: tags, BeforeTimestamp: before})
		if err != nil {
			return nil, err
		}
		sbs := resp.GetSandboxes()
		if len(sbs) == 0 {
			return out, nil
		}
		out = append(out, sbs...)
		next := sbs[len(sbs)-1].GetCreatedAt()
		if before != 0 && next >= before {
			return out, nil // a server that does not page
		}
		before = next
	}
	return out, nil
}

// cleanupDelays are the waits between the attempts of cleanupAfterCreate.
var cleanupDelays = []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}

// cleanupAfterCreate terminates, in the background, whatever Modal sandbox
// carries sandboxID after a create whose outcome is unknown: Modal may
// finish creating it after the client gave up. Modal's own lifetime and the
// reconciler are the backstops.
func (b *Backend) cleanupAfterCreate(sandboxID string) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for _, d := range cleanupDelays {
			t := time.NewTimer(d)
			select {
			case <-b.stop:
				t.Stop()
				return
			case <-t.C:
			}
			// Cleanup after an abandoned create, on a goroutine the backend waits for (b.stop ends it between tries): its own bound, no caller.
			ctx, cancel := context.WithTimeout(context.Background(), b.cfg.RequestTimeout)
			found, err := b.find(ctx, sandboxID)
			for _, sb := range found {
				b.terminate(ctx, sb.GetId())
				b.log.Info("sandbox of a failed create terminated", "sandbox_id", sandboxID, "modal_sandbox_id", sb.GetId())
			}
			cancel()
			if err == nil && len(found) > 0 {
				return
			}
		}
	}()
}

// terminate ends a Modal sandbox (idempotent) and waits, bounded by ctx,
// until Modal reports it finished.
func (b *Backend) terminate(ctx context.Context, modalID string) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
	defer cancel()
	if _, err := b.api.API().SandboxTerminate(ctx, &pb.SandboxTerminateRequest{SandboxId: modalID}); err != nil {
		if isCode(err, codes.NotFound) {
			return nil
		}
		return err
	}
	for {
		resp, err := b.api.API().SandboxWait(ctx, &pb.SandboxWaitRequest{SandboxId: modalID, Timeout: 10})
		if err != nil {
			if isCode(err, codes.NotFound) {
				return nil
			}
			return err
		}
		if resp.Result != nil {
			return nil
		}
	}
}

// lookup returns the box of a sandbox. A sandbox this process did not
// create (a worker restart) is found by its tags and adopted.
func (b *Backend) lookup(ctx context.Context, sandboxID string) (*box, error) {
	return b.boxes.Lookup(ctx, sandboxID, b.cfg.RequestTimeout, func(ctx context.Context) (*box, error) {
		found, err := b.find(ctx, sandboxID)
		if err != nil {
			return nil, sbxError(err, "find sandbox")
		}
		for _, sb := range found {
			if tagValue(sb.GetTags(), TagWorker) != b.cfg.WorkerID {
				continue
			}
			nb, err := b.attach(ctx, sandboxID, sb.GetId())
			if err != nil {
				return nil, sbxError(err, "attach sandbox")
			}
			return nb, nil
		}
		return nil, events.Errorf(events.CodeSandboxGone, "no Modal sandbox holds sandbox %s", sandboxID)
	}, func(nb *box) { _ = nb.router.Close() })
}

func tagValue(tags []*pb.SandboxTag, name string) string {
	for _, t := range tags {
		if t.GetTagName() == name {
			return t.GetTagValue()
		}
	}
	return ""
}

// forget drops a box (its sandbox ended).
func (b *Backend) forget(sandboxID string) {
	if bx, ok := b.boxes.Delete(sandboxID); ok {
		_ = bx.router.Close()
	}
}

// Kill implements worker.Backend: SandboxTerminate, then SandboxWait until
// Modal reports the sandbox finished.
func (b *Backend) Kill(ctx context.Context, sandboxID string) error {
	var ids []string
	if bx, ok := b.boxes.Get(sandboxID); ok {
		ids = []string{bx.modalID}
	} else {
		found, err := b.find(ctx, sandboxID)
		if err != nil {
			return sbxError(err, "find sandbox")
		}
		for _, sb := range found {
			ids = append(ids, sb.GetId())
		}
	}
	for _, id := range ids {
		if err := b.terminate(ctx, id); err != nil {
			return sbxError(err, "terminate sandbox")
		}
	}
	b.forget(sandboxID)
	b.log.Info("sandbox killed", "sandbox_id", sandboxID)
	return nil
}

// SetTimeout implements worker.TimeoutSetter by refusing: Modal has no RPC
// that changes a running sandbox's lifetime (it was created with the full
// lifetime the request asked for).
func (b *Backend) SetTimeout(ctx context.Context, sandboxID string, deadline time.Time) error {
	return events.Errorf(events.CodeCapabilityNotSupp, "Modal cannot change a sandbox's lifetime after it is created; create it with the lifetime it needs").With("field", "timeout_s")
}

// ListSandboxes implements worker.Lister: the running Modal sandboxes
// tagged with this worker.
func (b *Backend) ListSandboxes(ctx context.Context) ([]worker.Listed, error) {
	all, err := b.list(ctx, []*pb.SandboxTag{{TagName: TagWorker, TagValue: b.cfg.WorkerID}})
	if err != nil {
		return nil, sbxError(err, "list sandboxes")
	}
	out := make([]worker.Listed, 0, len(all))
	for _, sb := range all {
		id := sandboxIDOf(sb)
		if id == "" {
			continue
		}
		l := worker.Listed{SandboxID: id, WorkerID: tagValue(sb.GetTags(), TagWorker), CreatedAt: floatTime(sb.GetCreatedAt())}
		if d, err := strconv.ParseInt(tagValue(sb.GetTags(), TagDeadline), 10, 64); err == nil {
			l.Deadline = time.Unix(d, 0).UTC()
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SandboxID < out[j].SandboxID })
	return out, nil
}

func floatTime(f float64) time.Time {
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)).UTC()
}

// createError maps a failed create step.
func createError(ctx context.Context, err error, op string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var sbx *events.Error
	if errors.As(err, &sbx) {
		return err
	}
	switch {
	case isCode(err, codes.InvalidArgument), isCode(err, codes.FailedPrecondition), isCode(err, codes.AlreadyExists), isCode(err, codes.NotFound):
		return wrap(events.Errorf(events.CodeCreateFailed, "Modal refused the sandbox (%s): %s", op, grpcMessage(err)), err)
	}
	return sbxError(err, op)
}
