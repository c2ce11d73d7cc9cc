package modalfake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	pb "github.com/sandboxio/sandboxio/services/modal-worker/internal/gen/modalclient"
)

// MaxTimeoutSecs is Modal's maximum sandbox lifetime (24 h).
const MaxTimeoutSecs = 86400

type controlServer struct {
	pb.UnimplementedModalClientServer
	s *Server
}

func (c *controlServer) AuthTokenGet(ctx context.Context, _ *pb.AuthTokenGetRequest) (*pb.AuthTokenGetResponse, error) {
	exp := time.Now().Add(time.Hour)
	tok := makeJWT(map[string]any{"exp": exp.Unix(), "sub": c.s.tokenID})
	c.s.mu.Lock()
	c.s.authTokens[tok] = exp
	c.s.mu.Unlock()
	return &pb.AuthTokenGetResponse{Token: tok}, nil
}

func (c *controlServer) AppGetOrCreate(ctx context.Context, r *pb.AppGetOrCreateRequest) (*pb.AppGetOrCreateResponse, error) {
	s := c.s
	if !reName.MatchString(r.GetAppName()) || reAppID.MatchString(r.GetAppName()) {
		s.deviate("AppGetOrCreate: app_name %q is not a valid name", r.GetAppName())
		return nil, status.Errorf(codes.InvalidArgument, "Invalid App name: %q", r.GetAppName())
	}
	env := r.GetEnvironmentName()
	if env == "" {
		env = s.environment
	}
	if env != s.environment {
		return nil, status.Errorf(codes.NotFound, "Environment '%s' not found", env)
	}
	key := env + "/" + r.GetAppName()
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.appByName[key]; ok {
		if r.GetObjectCreationType() == pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_FAIL_IF_EXISTS {
			return nil, status.Errorf(codes.AlreadyExists, "App '%s' already exists", r.GetAppName())
		}
		return &pb.AppGetOrCreateResponse{AppId: id}, nil
	}
	switch r.GetObjectCreationType() {
	case pb.ObjectCreationType_OBJECT_CREATION_TYPE_UNSPECIFIED:
		return nil, status.Errorf(codes.NotFound, "App '%s' not found", r.GetAppName())
	case pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING, pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_FAIL_IF_EXISTS:
	default:
		s.deviate("AppGetOrCreate: object_creation_type %v makes no sense for a named app", r.GetObjectCreationType())
		return nil, status.Error(codes.InvalidArgument, "unsupported object_creation_type")
	}
	a := &app{id: "ap-" + randAlnum(22), name: r.GetAppName(), env: env}
	s.apps[a.id] = a
	s.appByName[key] = a.id
	return &pb.AppGetOrCreateResponse{AppId: a.id}, nil
}

// ImageBuilderVersion is the builder version the fake's environment uses.
const ImageBuilderVersion = "2025.06"

func (c *controlServer) EnvironmentGetOrCreate(ctx context.Context, r *pb.EnvironmentGetOrCreateRequest) (*pb.EnvironmentGetOrCreateResponse, error) {
	name := r.GetDeploymentName()
	if name == "" {
		name = c.s.environment
	}
	if name != c.s.environment {
		return nil, status.Errorf(codes.NotFound, "Environment '%s' not found", name)
	}
	return &pb.EnvironmentGetOrCreateResponse{EnvironmentId: "en-" + strings.Repeat("0", 22),
		Metadata: &pb.EnvironmentMetadata{Name: name, Settings: &pb.EnvironmentSettings{ImageBuilderVersion: ImageBuilderVersion}}}, nil
}

func (s *Server) knownApp(method, id string) error {
	if !reAppID.MatchString(id) {
		s.deviate("%s: app_id %q is not an app id", method, id)
		return status.Errorf(codes.InvalidArgument, "invalid app_id %q", id)
	}
	s.mu.Lock()
	_, ok := s.apps[id]
	s.mu.Unlock()
	if !ok {
		return status.Errorf(codes.NotFound, "App %s not found", id)
	}
	return nil
}

func (c *controlServer) ImageGetOrCreate(ctx context.Context, r *pb.ImageGetOrCreateRequest) (*pb.ImageGetOrCreateResponse, error) {
	s := c.s
	if err := s.knownApp("ImageGetOrCreate", r.GetAppId()); err != nil {
		return nil, err
	}
	img := r.GetImage()
	cmds := img.GetDockerfileCommands()
	if len(cmds) == 0 || !strings.HasPrefix(cmds[0], "FROM ") || strings.TrimSpace(strings.TrimPrefix(cmds[0], "FROM ")) == "" {
		s.deviate("ImageGetOrCreate: dockerfile_commands %q does not start with FROM <tag>", cmds)
		return nil, status.Error(codes.InvalidArgument, "image needs a FROM command")
	}
	if r.GetBuilderVersion() == "" {
		s.deviate("ImageGetOrCreate: no builder_version")
		return nil, status.Error(codes.InvalidArgument, "missing builder_version")
	}
	for _, b := range img.GetBaseImages() {
		s.mu.Lock()
		ok := s.images[b.GetImageId()]
		s.mu.Unlock()
		if !ok {
			return nil, status.Errorf(codes.NotFound, "base image %s not found", b.GetImageId())
		}
	}
	raw, _ := proto.MarshalOptions{Deterministic: true}.Marshal(img)
	sum := sha256.Sum256(append(raw, r.GetBuilderVersion()...))
	id := "im-" + base62Of(sum[:], 22)
	tag := strings.TrimSpace(strings.TrimPrefix(cmds[0], "FROM "))
	if strings.Contains(tag, "does-not-exist") {
		return &pb.ImageGetOrCreateResponse{ImageId: id, Result: &pb.GenericResult{Status: pb.GenericResult_GENERIC_STATUS_FAILURE,
			Exception: fmt.Sprintf("pull access denied for %s, repository does not exist", tag)}}, nil
	}
	s.mu.Lock()
	s.images[id] = true
	s.mu.Unlock()
	if s.opts.DeferBuilds {
		return &pb.ImageGetOrCreateResponse{ImageId: id}, nil
	}
	return &pb.ImageGetOrCreateResponse{ImageId: id, Result: &pb.GenericResult{Status: pb.GenericResult_GENERIC_STATUS_SUCCESS}, Metadata: &pb.ImageMetadata{}}, nil
}

func base62Of(b []byte, n int) string {
	h := hex.EncodeToString(b)
	out := make([]byte, n)
	for i := range out {
		out[i] = base62[int(h[i%len(h)])*(i+7)%len(base62)]
	}
	return string(out)
}

func (c *controlServer) ImageJoinStreaming(r *pb.ImageJoinStreamingRequest, stream grpc.ServerStreamingServer[pb.ImageJoinStreamingResponse]) error {
	s := c.s
	if !reImageID.MatchString(r.GetImageId()) {
		s.deviate("ImageJoinStreaming: image_id %q is not an image id", r.GetImageId())
		return status.Error(codes.InvalidArgument, "invalid image_id")
	}
	s.mu.Lock()
	ok := s.images[r.GetImageId()]
	s.mu.Unlock()
	if !ok {
		return status.Errorf(codes.NotFound, "Image %s not found", r.GetImageId())
	}
	if err := stream.Send(&pb.ImageJoinStreamingResponse{EntryId: "1-0", TaskLogs: []*pb.TaskLogs{{Data: "Building image " + r.GetImageId() + "\n", FileDescriptor: pb.FileDescriptor_FILE_DESCRIPTOR_INFO}}}); err != nil {
		return err
	}
	return stream.Send(&pb.ImageJoinStreamingResponse{EntryId: "2-0", Result: &pb.GenericResult{Status: pb.GenericResult_GENERIC_STATUS_SUCCESS}, Eof: true})
}

func (c *controlServer) SecretGetOrCreate(ctx context.Context, r *pb.SecretGetOrCreateRequest) (*pb.SecretGetOrCreateResponse, error) {
	s := c.s
	if r.GetObjectCreationType() != pb.ObjectCreationType_OBJECT_CREATION_TYPE_EPHEMERAL {
		if r.GetDeploymentName() == "" {
			s.deviate("SecretGetOrCreate: a named lookup without deployment_name")
			return nil, status.Error(codes.InvalidArgument, "missing deployment_name")
		}
		return nil, status.Errorf(codes.NotFound, "Secret '%s' not found", r.GetDeploymentName())
	}
	if r.GetDeploymentName() != "" {
		s.deviate("SecretGetOrCreate: an ephemeral secret with a deployment_name")
		return nil, status.Error(codes.InvalidArgument, "ephemeral secrets have no name")
	}
	if len(r.GetEnvDict()) == 0 {
		s.deviate("SecretGetOrCreate: an ephemeral secret without env_dict")
		return nil, status.Error(codes.InvalidArgument, "empty env_dict")
	}
	if r.GetAppId() != "" {
		if err := s.knownApp("SecretGetOrCreate", r.GetAppId()); err != nil {
			return nil, err
		}
	}
	for k := range r.GetEnvDict() {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, status.Errorf(codes.InvalidArgument, "invalid secret key %q", k)
		}
	}
	id := "st-" + randAlnum(22)
	env := make(map[string]string, len(r.GetEnvDict()))
	for k, v := range r.GetEnvDict() {
		env[k] = v
	}
	s.mu.Lock()
	s.secrets[id] = env
	s.mu.Unlock()
	return &pb.SecretGetOrCreateResponse{SecretId: id, Metadata: &pb.SecretMetadata{}}, nil
}

func validTags(tags []*pb.SandboxTag) error {
	for _, t := range tags {
		if !reTag.MatchString(t.GetTagName()) || !reTag.MatchString(t.GetTagValue()) {
			return status.Errorf(codes.InvalidArgument, "invalid tag %q=%q: keys and values must match %s", t.GetTagName(), t.GetTagValue(), reTag)
		}
	}
	return nil
}

func (c *controlServer) SandboxCreate(ctx context.Context, r *pb.SandboxCreateRequest) (*pb.SandboxCreateResponse, error) {
	s := c.s
	if err := s.knownApp("SandboxCreate", r.GetAppId()); err != nil {
		return nil, err
	}
	def := r.GetDefinition()
	if def == nil {
		s.deviate("SandboxCreate: no definition")
		return nil, status.Error(codes.InvalidArgument, "missing definition")
	}
	if r.GetEnvironmentName() != "" {
		s.deviate("SandboxCreate: environment_name is deprecated (the app decides)")
	}
	if !reImageID.MatchString(def.GetImageId()) {
		s.deviate("SandboxCreate: image_id %q is not an image id", def.GetImageId())
		return nil, status.Error(codes.InvalidArgument, "invalid image_id")
	}
	s.mu.Lock()
	imageOK := s.images[def.GetImageId()]
	var env map[string]string
	for _, sid := range def.GetSecretIds() {
		sec, ok := s.secrets[sid]
		if !ok {
			s.mu.Unlock()
			return nil, status.Errorf(codes.NotFound, "Secret %s not found", sid)
		}
		if env == nil {
			env = map[string]string{}
		}
		for k, v := range sec {
			env[k] = v
		}
	}
	s.mu.Unlock()
	if !imageOK {
		return nil, status.Errorf(codes.NotFound, "Image %s not found", def.GetImageId())
	}
	if def.GetTimeoutSecs() == 0 {
		s.deviate("SandboxCreate: timeout_secs is 0 (the SDKs always send one; default 300)")
	}
	if def.GetTimeoutSecs() > MaxTimeoutSecs {
		return nil, status.Errorf(codes.InvalidArgument, "timeout_secs %d exceeds the maximum of %d", def.GetTimeoutSecs(), MaxTimeoutSecs)
	}
	na := def.GetNetworkAccess()
	if na == nil {
		s.deviate("SandboxCreate: no network_access (the SDKs always set it)")
		return nil, status.Error(codes.InvalidArgument, "missing network_access")
	}
	switch na.GetNetworkAccessType() {
	case pb.NetworkAccessType_NETWORK_ACCESS_TYPE_OPEN, pb.NetworkAccessType_NETWORK_ACCESS_TYPE_BLOCKED:
		if len(na.GetAllowedCidrs())+len(na.GetAllowedDomains()) > 0 {
			return nil, status.Error(codes.InvalidArgument, "allowlists need network_access_type ALLOWLIST")
		}
	case pb.NetworkAccessType_NETWORK_ACCESS_TYPE_ALLOWLIST:
	default:
		s.deviate("SandboxCreate: network_access_type UNSPECIFIED")
		return nil, status.Error(codes.InvalidArgument, "network_access_type unspecified")
	}
	blocked := na.GetNetworkAccessType() == pb.NetworkAccessType_NETWORK_ACCESS_TYPE_BLOCKED || def.GetBlockNetwork()
	if blocked && (len(def.GetOpenPorts().GetPorts()) > 0 || len(def.GetInboundCidrAllowlist()) > 0 || def.GetI6PnEnabled()) {
		return nil, status.Error(codes.InvalidArgument, "block_network cannot be combined with open ports, inbound allowlists or i6pn")
	}
	if def.GetBlockNetwork() && na.GetNetworkAccessType() != pb.NetworkAccessType_NETWORK_ACCESS_TYPE_BLOCKED {
		return nil, status.Error(codes.InvalidArgument, "block_network contradicts network_access")
	}
	if def.Workdir != nil && !strings.HasPrefix(def.GetWorkdir(), "/") {
		return nil, status.Errorf(codes.InvalidArgument, "workdir %q must be absolute", def.GetWorkdir())
	}
	if def.GetPtyInfo().GetEnabled() {
		return nil, status.Error(codes.Unimplemented, "modalfake: PTY sandboxes are not supported")
	}
	if len(def.GetEntrypointArgs()) > 0 {
		return nil, status.Error(codes.Unimplemented, "modalfake: only sandboxes without an entrypoint (sleep until terminated) are supported")
	}
	if def.Name != nil && def.GetName() != "" && (!reName.MatchString(def.GetName()) || reAppID.MatchString(def.GetName())) {
		return nil, status.Errorf(codes.InvalidArgument, "Invalid Sandbox name: %q", def.GetName())
	}
	if res := def.GetResources(); res != nil {
		if res.GetEphemeralDiskMb() > 0 {
			s.deviate("SandboxCreate: resources.ephemeral_disk_mb %d (the SDKs never send it for a sandbox: \"Ephemeral disk requests not supported on Sandboxes\")", res.GetEphemeralDiskMb())
			return nil, status.Error(codes.InvalidArgument, "ephemeral disk requests are not supported on sandboxes")
		}
		if res.GetMilliCpuMax() > 0 && res.GetMilliCpuMax() < res.GetMilliCpu() || res.GetMemoryMbMax() > 0 && res.GetMemoryMbMax() < res.GetMemoryMb() {
			return nil, status.Error(codes.InvalidArgument, "a resource limit is below its request")
		}
	}
	if err := validTags(r.GetTags()); err != nil {
		return nil, err
	}

	s.mu.Lock()
	delay := s.faults.createDelay
	s.mu.Unlock()
	if delay > 0 {
		// A slow control plane: the sandbox is created even if the client
		// stops waiting (the work was accepted).
		time.Sleep(delay) // the injected latency itself
	}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "server shutting down")
	}
	if name := def.GetName(); name != "" {
		for _, o := range s.sandboxes {
			if o.appID == r.GetAppId() && o.def.GetName() == name && o.result == nil {
				s.mu.Unlock()
				return nil, status.Errorf(codes.AlreadyExists, "a running sandbox named %q already exists in this app", name)
			}
		}
	}
	id := "sb-" + randAlnum(22)
	s.mu.Unlock()
	root, err := s.newRoot(id)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "sandbox directory: %v", err)
	}
	sbNet, err := newNet(context.WithoutCancel(ctx), na) // accepted work goes on without the client
	if err != nil {
		return nil, status.Errorf(codes.Internal, "modalfake: sandbox network: %v", err)
	}
	now := time.Now()
	s.mu.Lock()
	envName := s.apps[r.GetAppId()].env
	s.mu.Unlock()
	sb := &sandbox{id: id, appID: r.GetAppId(), envName: envName, taskID: "ta-" + randAlnum(22),
		def: proto.Clone(def).(*pb.Sandbox), tags: cloneTags(r.GetTags()), created: now, scheduledAt: now.Add(s.opts.ScheduleDelay),
		root: root, done: make(chan struct{}), execs: map[string]*proc{}, env: env, net: sbNet}
	s.mu.Lock()
	s.sandboxes[id] = sb
	s.tasks[sb.taskID] = sb
	lifetime := time.Duration(def.GetTimeoutSecs()) * time.Second
	if lifetime == 0 {
		lifetime = 300 * time.Second
	}
	sb.timer = time.AfterFunc(lifetime, func() {
		s.finish(sb, pb.GenericResult_GENERIC_STATUS_TIMEOUT, 124, "sandbox timed out")
	})
	s.mu.Unlock()
	s.log.Debug("sandbox created", "sandbox_id", id, "timeout_secs", def.GetTimeoutSecs())
	return &pb.SandboxCreateResponse{SandboxId: id, Metadata: &pb.SandboxHandleMetadata{AppId: r.GetAppId()}}, nil
}

func cloneTags(in []*pb.SandboxTag) []*pb.SandboxTag {
	out := make([]*pb.SandboxTag, 0, len(in))
	for _, t := range in {
		out = append(out, &pb.SandboxTag{TagName: t.GetTagName(), TagValue: t.GetTagValue()})
	}
	return out
}

// sandboxFor validates a V1 sandbox id and finds the sandbox.
func (s *Server) sandboxFor(method, id string) (*sandbox, error) {
	if !reSandboxV1.MatchString(id) {
		s.deviate("%s: sandbox_id %q is not a V1 sandbox id (sb- + 22 base62)", method, id)
		return nil, status.Errorf(codes.InvalidArgument, "invalid sandbox_id %q", id)
	}
	s.mu.Lock()
	sb := s.sandboxes[id]
	s.mu.Unlock()
	if sb == nil {
		return nil, status.Errorf(codes.NotFound, "Sandbox %s not found", id)
	}
	return sb, nil
}

func (c *controlServer) SandboxGetTaskId(ctx context.Context, r *pb.SandboxGetTaskIdRequest) (*pb.SandboxGetTaskIdResponse, error) {
	sb, err := c.s.sandboxFor("SandboxGetTaskId", r.GetSandboxId())
	if err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if sb.result != nil {
		return &pb.SandboxGetTaskIdResponse{TaskResult: proto.Clone(sb.result).(*pb.GenericResult)}, nil
	}
	if time.Now().Before(sb.scheduledAt) {
		return &pb.SandboxGetTaskIdResponse{}, nil
	}
	return &pb.SandboxGetTaskIdResponse{TaskId: proto.String(sb.taskID)}, nil
}

func (c *controlServer) SandboxWait(ctx context.Context, r *pb.SandboxWaitRequest) (*pb.SandboxWaitResponse, error) {
	sb, err := c.s.sandboxFor("SandboxWait", r.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if r.GetTimeout() < 0 || r.GetTimeout() > 300 {
		c.s.deviate("SandboxWait: timeout %v out of range (the SDKs send 0 or 10)", r.GetTimeout())
		return nil, status.Error(codes.InvalidArgument, "invalid timeout")
	}
	t := time.NewTimer(time.Duration(float64(r.GetTimeout()) * float64(time.Second)))
	defer t.Stop()
	select {
	case <-sb.done:
	case <-t.C:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	md := &pb.SandboxHandleMetadata{AppId: sb.appID}
	if sb.result == nil {
		return &pb.SandboxWaitResponse{Metadata: md}, nil // still running: result unset
	}
	md.Result = proto.Clone(sb.result).(*pb.GenericResult)
	return &pb.SandboxWaitResponse{Result: proto.Clone(sb.result).(*pb.GenericResult), Metadata: md}, nil
}

func (c *controlServer) SandboxTerminate(ctx context.Context, r *pb.SandboxTerminateRequest) (*pb.SandboxTerminateResponse, error) {
	sb, err := c.s.sandboxFor("SandboxTerminate", r.GetSandboxId())
	if err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	existing := sb.result
	c.s.mu.Unlock()
	if existing != nil {
		return &pb.SandboxTerminateResponse{ExistingResult: proto.Clone(existing).(*pb.GenericResult)}, nil
	}
	c.s.finish(sb, pb.GenericResult_GENERIC_STATUS_TERMINATED, -1, "terminated by the client")
	return &pb.SandboxTerminateResponse{}, nil
}

func hasTags(have, want []*pb.SandboxTag) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			if h.GetTagName() == w.GetTagName() && h.GetTagValue() == w.GetTagValue() {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func unixFloat(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func (c *controlServer) SandboxList(ctx context.Context, r *pb.SandboxListRequest) (*pb.SandboxListResponse, error) {
	s := c.s
	if r.GetAppId() != "" {
		if err := s.knownApp("SandboxList", r.GetAppId()); err != nil {
			return nil, err
		}
	}
	env := r.GetEnvironmentName()
	if env == "" {
		env = s.environment
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var match []*sandbox
	for _, sb := range s.sandboxes {
		if r.GetAppId() != "" && sb.appID != r.GetAppId() || sb.envName != env {
			continue
		}
		if sb.result != nil && !r.GetIncludeFinished() {
			continue
		}
		if r.GetBeforeTimestamp() != 0 && unixFloat(sb.created) >= r.GetBeforeTimestamp() {
			continue
		}
		if !hasTags(sb.tags, r.GetTags()) {
			continue
		}
		match = append(match, sb)
	}
	sort.Slice(match, func(i, j int) bool { return match[i].created.After(match[j].created) })
	if len(match) > s.opts.PageSize {
		match = match[:s.opts.PageSize]
	}
	resp := &pb.SandboxListResponse{}
	for _, sb := range match {
		info := &pb.SandboxInfo{Id: sb.id, CreatedAt: unixFloat(sb.created), AppId: sb.appID, Tags: cloneTags(sb.tags), Name: sb.def.GetName(),
			ImageId: sb.def.GetImageId(), TimeoutSecs: sb.def.GetTimeoutSecs(),
			TaskInfo: &pb.TaskInfo{Id: sb.taskID, StartedAt: unixFloat(sb.scheduledAt), EnqueuedAt: unixFloat(sb.created), SandboxId: sb.id},
			Metadata: &pb.SandboxHandleMetadata{AppId: sb.appID}}
		if sb.result != nil {
			info.TaskInfo.Result = proto.Clone(sb.result).(*pb.GenericResult)
		}
		resp.Sandboxes = append(resp.Sandboxes, info)
	}
	return resp, nil
}

func (c *controlServer) SandboxTagsSet(ctx context.Context, r *pb.SandboxTagsSetRequest) (*emptypb.Empty, error) {
	sb, err := c.s.sandboxFor("SandboxTagsSet", r.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if err := validTags(r.GetTags()); err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	sb.tags = cloneTags(r.GetTags())
	c.s.mu.Unlock()
	return &emptypb.Empty{}, nil
}

func (c *controlServer) SandboxTagsGet(ctx context.Context, r *pb.SandboxTagsGetRequest) (*pb.SandboxTagsGetResponse, error) {
	sb, err := c.s.sandboxFor("SandboxTagsGet", r.GetSandboxId())
	if err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return &pb.SandboxTagsGetResponse{Tags: cloneTags(sb.tags)}, nil
}

// RouterJWTTTL is the lifetime of a router JWT.
const RouterJWTTTL = 10 * time.Minute

func (c *controlServer) TaskGetCommandRouterAccess(ctx context.Context, r *pb.TaskGetCommandRouterAccessRequest) (*pb.TaskGetCommandRouterAccessResponse, error) {
	s := c.s
	if !reTaskID.MatchString(r.GetTaskId()) {
		s.deviate("TaskGetCommandRouterAccess: task_id %q is not a task id", r.GetTaskId())
		return nil, status.Error(codes.InvalidArgument, "invalid task_id")
	}
	s.mu.Lock()
	sb := s.tasks[r.GetTaskId()]
	gen := s.routerGen
	s.mu.Unlock()
	if sb == nil {
		return nil, status.Errorf(codes.NotFound, "Task %s not found", r.GetTaskId())
	}
	jwt := makeJWT(map[string]any{"exp": time.Now().Add(RouterJWTTTL).Unix(), "task_id": r.GetTaskId(), "gen": gen})
	return &pb.TaskGetCommandRouterAccessResponse{Jwt: jwt, Url: s.RouterURL()}, nil
}
