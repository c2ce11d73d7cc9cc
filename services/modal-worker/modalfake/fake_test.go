package modalfake_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/sandboxio/sandboxio/services/modal-worker/internal/gen/modalclient"
	tcr "github.com/sandboxio/sandboxio/services/modal-worker/internal/gen/taskcommandrouter"
	"github.com/sandboxio/sandboxio/services/modal-worker/internal/modalapi"
	"github.com/sandboxio/sandboxio/services/modal-worker/modalfake"
)

// raw is a hand-driven client: it lets a test send what our client never
// would, to check that the fake catches it.
type raw struct {
	srv  *modalfake.Server
	api  pb.ModalClientClient
	conn *grpc.ClientConn
}

func dialRaw(t *testing.T, srv *modalfake.Server) *raw {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(srv.URL(), "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &raw{srv: srv, api: pb.NewModalClientClient(conn), conn: conn}
}

// headers are what a correct client sends.
func (r *raw) headers(ctx context.Context, t *testing.T, withAuth bool) context.Context {
	id, secret := r.srv.Token()
	md := []string{"x-modal-client-type", "9", "x-modal-client-version", "1.0.0", "x-modal-token-id", id, "x-modal-token-secret", secret,
		"x-idempotency-key", modalapi.NewUUID()}
	if withAuth {
		resp, err := r.api.AuthTokenGet(metadata.AppendToOutgoingContext(ctx, md...), &pb.AuthTokenGetRequest{})
		if err != nil {
			t.Fatal(err)
		}
		md = append(md, "x-modal-auth-token", resp.GetToken())
	}
	return metadata.AppendToOutgoingContext(ctx, md...)
}

func newFake(t *testing.T) *modalfake.Server {
	srv := modalfake.New(modalfake.Options{TB: t})
	srv.Start()
	return srv
}

func TestValidation(t *testing.T) {
	srv := newFake(t)
	r := dialRaw(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	good := r.headers(ctx, t, true)
	app, err := r.api.AppGetOrCreate(good, &pb.AppGetOrCreateRequest{AppName: "v", ObjectCreationType: pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING})
	if err != nil {
		t.Fatal(err)
	}
	if d := srv.TakeDeviations(); len(d) != 0 {
		t.Fatalf("a correct client deviated: %v", d)
	}
	withUnknown := &pb.SandboxGetTaskIdRequest{SandboxId: "sb-" + strings.Repeat("a", 22)}
	withUnknown.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	tests := []struct {
		name      string
		call      func() error
		code      codes.Code
		deviation string
	}{
		{"no headers", func() error {
			_, err := r.api.AuthTokenGet(ctx, &pb.AuthTokenGetRequest{})
			return err
		}, codes.FailedPrecondition, "x-modal-client-type"},
		{"no auth token", func() error {
			_, err := r.api.SandboxList(r.headers(ctx, t, false), &pb.SandboxListRequest{AppId: app.GetAppId()})
			return err
		}, codes.Unauthenticated, "x-modal-auth-token"},
		{"unknown field", func() error {
			_, err := r.api.SandboxGetTaskId(good, withUnknown)
			return err
		}, codes.InvalidArgument, "unknown fields"},
		{"V2-shaped sandbox id", func() error {
			_, err := r.api.SandboxWait(good, &pb.SandboxWaitRequest{SandboxId: "sb-01ARZ3NDEKTSV4RRFFQ69G5FAV"})
			return err
		}, codes.InvalidArgument, "not a V1 sandbox id"},
		{"create without network_access", func() error {
			img, err := r.api.ImageGetOrCreate(good, &pb.ImageGetOrCreateRequest{AppId: app.GetAppId(), BuilderVersion: "2025.06", Image: &pb.Image{DockerfileCommands: []string{"FROM alpine"}}})
			if err != nil {
				return err
			}
			_, err = r.api.SandboxCreate(good, &pb.SandboxCreateRequest{AppId: app.GetAppId(), Definition: &pb.Sandbox{ImageId: img.GetImageId(), TimeoutSecs: 60}})
			return err
		}, codes.InvalidArgument, "no network_access"},
		{"image without builder version", func() error {
			_, err := r.api.ImageGetOrCreate(good, &pb.ImageGetOrCreateRequest{AppId: app.GetAppId(), Image: &pb.Image{DockerfileCommands: []string{"FROM alpine"}}})
			return err
		}, codes.InvalidArgument, "builder_version"},
		{"bad app id", func() error {
			_, err := r.api.SandboxList(good, &pb.SandboxListRequest{AppId: "app-1"})
			return err
		}, codes.InvalidArgument, "not an app id"},
		{"wrong token is not a deviation", func() error {
			ctx := metadata.AppendToOutgoingContext(ctx, "x-modal-client-type", "9", "x-modal-client-version", "1.0.0", "x-modal-token-id", "ak-x", "x-modal-token-secret", "as-y", "x-idempotency-key", modalapi.NewUUID())
			_, err := r.api.AuthTokenGet(ctx, &pb.AuthTokenGetRequest{})
			return err
		}, codes.Unauthenticated, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if status.Code(err) != tc.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.code)
			}
			d := srv.TakeDeviations()
			if tc.deviation == "" {
				if len(d) != 0 {
					t.Fatalf("deviations %v, want none", d)
				}
				return
			}
			if len(d) == 0 || !strings.Contains(strings.Join(d, "\n"), tc.deviation) {
				t.Fatalf("deviations %v, want one about %q", d, tc.deviation)
			}
		})
	}
}

// TestRouterAuth: the router wants a current JWT for the task and only
// that; a Modal token sent to it is a deviation (it would leak the token to
// the worker host).
func TestRouterAuth(t *testing.T) {
	srv := newFake(t)
	conn, err := grpc.NewClient(strings.TrimPrefix(srv.RouterURL(), "https://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	router := tcr.NewTaskCommandRouterClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &tcr.TaskExecPollRequest{TaskId: "ta-" + strings.Repeat("a", 22), ExecId: modalapi.NewUUID()}
	if _, err := router.TaskExecPoll(ctx, req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no authorization: %v", err)
	}
	if d := srv.TakeDeviations(); len(d) != 1 {
		t.Fatalf("deviations %v", d)
	}
	id, secret := srv.Token()
	mctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer a.e30.c", "x-modal-token-id", id, "x-modal-token-secret", secret)
	_, _ = router.TaskExecPoll(mctx, req)
	if d := srv.TakeDeviations(); len(d) == 0 || !strings.Contains(d[0], "Modal token was sent to the router") {
		t.Fatalf("deviations %v", d)
	}
}

// TestUnknownFieldsAreFound checks the recursive unknown-field search on a
// nested message.
func TestUnknownFieldsAreFound(t *testing.T) {
	srv := newFake(t)
	r := dialRaw(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	good := r.headers(ctx, t, true)
	app, err := r.api.AppGetOrCreate(good, &pb.AppGetOrCreateRequest{AppName: "u", ObjectCreationType: pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING})
	if err != nil {
		t.Fatal(err)
	}
	def := &pb.Sandbox{ImageId: "im-" + strings.Repeat("a", 22), TimeoutSecs: 10, NetworkAccess: &pb.NetworkAccess{NetworkAccessType: pb.NetworkAccessType_NETWORK_ACCESS_TYPE_OPEN}}
	def.NetworkAccess.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 42, protowire.VarintType), 7))
	_, err = r.api.SandboxCreate(good, proto.Clone(&pb.SandboxCreateRequest{AppId: app.GetAppId(), Definition: def}).(*pb.SandboxCreateRequest))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("nested unknown field: %v", err)
	}
	if d := srv.TakeDeviations(); len(d) != 1 || !strings.Contains(d[0], "modal.client.NetworkAccess") {
		t.Fatalf("deviations %v", d)
	}
}
