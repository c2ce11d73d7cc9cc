package e2bapi_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/services/e2b-worker/e2bfake"
	"github.com/sandboxio/sandboxio/services/e2b-worker/internal/e2bapi"
)

func newFake(t *testing.T) (*e2bfake.Server, e2bapi.Config) {
	t.Helper()
	fake := e2bfake.New(e2bfake.Options{TB: t})
	fake.Start()
	cfg := e2bapi.ConfigFromEnv(func(k string) string { return fake.Env()[k] })
	cfg.RetryBaseDelay = time.Millisecond
	cfg.RetryMaxDelay = 5 * time.Second
	return fake, cfg
}

func newClient(t *testing.T, cfg e2bapi.Config) *e2bapi.Client {
	t.Helper()
	c, err := e2bapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestConfig(t *testing.T) {
	env := map[string]string{"E2B_API_KEY": "e2b_ab", "E2B_DOMAIN": "example.test"}
	cfg := e2bapi.ConfigFromEnv(func(k string) string { return env[k] })
	tests := []struct{ got, want string }{
		{cfg.APIBaseURL(), "https://api.example.test"},
		{cfg.EnvdURL("i1", ""), "https://49983-i1.example.test"},
		{cfg.EnvdURL("i1", "e2b.app"), "https://sandbox.e2b.app"},
		{cfg.PortURL(49999, "i1", "e2b.app"), "https://49999-i1.e2b.app"},
		{e2bapi.Config{}.APIBaseURL(), "https://api.e2b.app"},
		{e2bapi.Config{}.EnvdURL("i1", ""), "https://sandbox.e2b.app"},
		{e2bapi.Config{SandboxURL: "http://127.0.0.1:9/"}.EnvdURL("i1", "e2b.app"), "http://127.0.0.1:9"},
		{e2bapi.EncodeMetadataFilter(map[string]string{"user": "abc"}), "user=abc"},
		{url.Values{"metadata": {e2bapi.EncodeMetadataFilter(map[string]string{"user": "abc"})}}.Encode(), "metadata=user%3Dabc"},
		{e2bapi.EncodeMetadataFilter(map[string]string{"b": "x y&z", "a": "1"}), "a=1&b=x%20y%26z"},
	}
	for i, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%d: got %q, want %q", i, tc.got, tc.want)
		}
	}
	if s := cfg.String(); contains(s, "e2b_ab") {
		t.Errorf("Config.String leaks the key: %s", s)
	}
	if _, err := e2bapi.New(e2bapi.Config{}); err == nil {
		t.Error("New without a key must fail")
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestLifecycle(t *testing.T) {
	fake, cfg := newFake(t)
	c := newClient(t, cfg)
	ctx := ctxT(t)
	no := false
	sb, err := c.Create(ctx, e2bapi.CreateRequest{
		TemplateID: "base", Timeout: 90500 * time.Millisecond,
		Metadata: map[string]string{"user": "abc"}, EnvVars: map[string]string{"A": "1"},
		AllowInternetAccess: &no, Network: &e2bapi.NetworkConfig{AllowOut: []string{"1.1.1.1"}, DenyOut: []string{"0.0.0.0/0"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sb.SandboxID) != 21 || sb.SandboxID[0] != 'i' || sb.ClientID != "6532622b" || sb.EnvdVersion != e2bfake.EnvdVersion || sb.EnvdAccessToken == "" {
		t.Fatalf("sandbox = %+v", sb)
	}
	d, err := c.Get(ctx, sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != e2bapi.StateRunning || d.Metadata["user"] != "abc" || d.AllowInternetAccess == nil || *d.AllowInternetAccess {
		t.Fatalf("detail = %+v", d)
	}
	if got := d.EndAt.Sub(d.StartedAt); got < 90*time.Second || got > 92*time.Second {
		t.Errorf("lifetime = %v, want ceil(90.5s) = 91s", got)
	}
	if err := c.SetTimeout(ctx, sb.SandboxID, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	d2, _ := c.Get(ctx, sb.SandboxID)
	if !d2.EndAt.Before(d.EndAt) {
		t.Errorf("SetTimeout must be able to shorten: %v !< %v", d2.EndAt, d.EndAt)
	}
	if _, resumed, err := c.Connect(ctx, sb.SandboxID, time.Minute); err != nil || resumed {
		t.Fatalf("Connect running = %v, %v", resumed, err)
	}
	if ok, err := c.Pause(ctx, sb.SandboxID); err != nil || !ok {
		t.Fatalf("Pause = %v, %v", ok, err)
	}
	if ok, err := c.Pause(ctx, sb.SandboxID); err != nil || ok {
		t.Fatalf("Pause again = %v, %v; want false, nil (409)", ok, err)
	}
	if d, _ := c.Get(ctx, sb.SandboxID); d.State != e2bapi.StatePaused {
		t.Fatalf("state = %s", d.State)
	}
	if _, resumed, err := c.Connect(ctx, sb.SandboxID, time.Minute); err != nil || !resumed {
		t.Fatalf("Connect paused = %v, %v; want resumed", resumed, err)
	}
	if ok, err := c.Kill(ctx, sb.SandboxID); err != nil || !ok {
		t.Fatalf("Kill = %v, %v", ok, err)
	}
	if ok, err := c.Kill(ctx, sb.SandboxID); err != nil || ok {
		t.Fatalf("Kill again = %v, %v; want false, nil", ok, err)
	}
	for name, err := range map[string]error{
		"get":     func() error { _, err := c.Get(ctx, sb.SandboxID); return err }(),
		"timeout": c.SetTimeout(ctx, sb.SandboxID, time.Minute),
		"connect": func() error { _, _, err := c.Connect(ctx, sb.SandboxID, time.Minute); return err }(),
		"pause":   func() error { _, err := c.Pause(ctx, sb.SandboxID); return err }(),
	} {
		var apiErr *e2bapi.APIError
		if !errors.Is(err, e2bapi.ErrNotFound) || !errors.As(err, &apiErr) || apiErr.Code != 404 || apiErr.Message == "" {
			t.Errorf("%s after kill: %v, want ErrNotFound with body", name, err)
		}
	}
	_ = fake
}

func TestExpiry(t *testing.T) {
	fake, cfg := newFake(t)
	c := newClient(t, cfg)
	ctx := ctxT(t)
	sb, err := c.Create(ctx, e2bapi.CreateRequest{TemplateID: "base", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.Get(ctx, sb.SandboxID)
		if errors.Is(err, e2bapi.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox did not expire: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// autoPause: expiry pauses instead.
	sb2, err := c.Create(ctx, e2bapi.CreateRequest{TemplateID: "base", Timeout: time.Minute, AutoPause: true})
	if err != nil {
		t.Fatal(err)
	}
	fake.ExpireSandbox(sb2.SandboxID)
	if d, err := c.Get(ctx, sb2.SandboxID); err != nil || d.State != e2bapi.StatePaused || d.Lifecycle.OnTimeout != "pause" {
		t.Fatalf("after expiry with autoPause: %+v, %v", d, err)
	}
}

func TestListPagingAndFilters(t *testing.T) {
	_, cfg := newFake(t)
	c := newClient(t, cfg)
	ctx := ctxT(t)
	want := map[string]bool{}
	for i := 0; i < 5; i++ {
		md := map[string]string{"team": "a b&c"}
		if i%2 == 1 {
			md = map[string]string{"team": "other"}
		}
		sb, err := c.Create(ctx, e2bapi.CreateRequest{TemplateID: "base", Timeout: time.Minute, Metadata: md})
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			want[sb.SandboxID] = true
		}
	}
	page, err := c.List(ctx, e2bapi.ListOptions{Limit: 2})
	if err != nil || len(page.Sandboxes) != 2 || page.NextToken == "" {
		t.Fatalf("first page = %d items, token %q, %v", len(page.Sandboxes), page.NextToken, err)
	}
	all, err := c.ListAll(ctx, e2bapi.ListOptions{Limit: 2})
	if err != nil || len(all) != 5 {
		t.Fatalf("ListAll = %d, %v", len(all), err)
	}
	seen := map[string]bool{}
	for _, s := range all {
		if seen[s.SandboxID] {
			t.Errorf("duplicate %s across pages", s.SandboxID)
		}
		seen[s.SandboxID] = true
		if s.EnvdAccessToken != "" || s.Lifecycle != nil {
			t.Errorf("listed sandbox carries token/lifecycle: %+v", s)
		}
	}
	got, err := c.ListAll(ctx, e2bapi.ListOptions{Metadata: map[string]string{"team": "a b&c"}, States: []string{e2bapi.StateRunning}})
	if err != nil || len(got) != len(want) {
		t.Fatalf("filtered = %d, %v; want %d", len(got), err, len(want))
	}
	for _, s := range got {
		if !want[s.SandboxID] {
			t.Errorf("unexpected %s in filtered list", s.SandboxID)
		}
	}
	if got, _ := c.ListAll(ctx, e2bapi.ListOptions{States: []string{e2bapi.StatePaused}}); len(got) != 0 {
		t.Errorf("paused = %d, want 0", len(got))
	}
}

func TestErrors(t *testing.T) {
	fake, cfg := newFake(t)
	ctx := ctxT(t)
	tests := []struct {
		name   string
		cfg    func(*e2bapi.Config)
		faults e2bfake.Faults
		req    e2bapi.CreateRequest
		want   error
		status int
	}{
		{name: "bad key", cfg: func(c *e2bapi.Config) { c.APIKey = "e2b_bad" }, want: e2bapi.ErrUnauthorized, status: 401},
		{name: "timeout too long", req: e2bapi.CreateRequest{Timeout: 2 * time.Hour}, want: e2bapi.ErrBadRequest, status: 400},
		{name: "rate limited beyond retries", cfg: func(c *e2bapi.Config) { c.MaxRetries = 1 }, faults: e2bfake.Faults{RateLimit: 5}, want: e2bapi.ErrRateLimited, status: 429},
		{name: "rate limited then ok", faults: e2bfake.Faults{RateLimit: 2}},
		{name: "no retries", cfg: func(c *e2bapi.Config) { c.MaxRetries = -1 }, faults: e2bfake.Faults{RateLimit: 1}, want: e2bapi.ErrRateLimited, status: 429},
		{name: "unavailable", faults: e2bfake.Faults{ServerErrors: 1}, want: e2bapi.ErrUnavailable, status: 503},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c2 := cfg
			if tc.cfg != nil {
				tc.cfg(&c2)
			}
			fake.SetFaults(tc.faults)
			defer fake.SetFaults(e2bfake.Faults{})
			if tc.req.TemplateID == "" {
				tc.req.TemplateID = "base"
			}
			_, err := newClient(t, c2).Create(ctx, tc.req)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var apiErr *e2bapi.APIError
			if !errors.Is(err, tc.want) || !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status || apiErr.Code != tc.status {
				t.Fatalf("err = %#v, want %v (%d)", err, tc.want, tc.status)
			}
			if contains(err.Error(), c2.APIKey) {
				t.Fatalf("error leaks the key: %v", err)
			}
		})
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	fake, cfg := newFake(t)
	fake.SetFaults(e2bfake.Faults{RateLimit: 1, RetryAfter: "1"})
	start := time.Now()
	if _, err := newClient(t, cfg).Create(ctxT(t), e2bapi.CreateRequest{TemplateID: "base"}); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < time.Second {
		t.Fatalf("retried after %v, want >= Retry-After (1s)", el)
	}
	// Context cancellation during the back-off wins.
	fake.SetFaults(e2bfake.Faults{RateLimit: 1, RetryAfter: "5"})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := newClient(t, cfg).Create(ctx, e2bapi.CreateRequest{TemplateID: "base"})
	if !errors.Is(err, e2bapi.ErrRateLimited) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want rate limited + deadline", err)
	}
}

func TestMissingKeyAndDelay(t *testing.T) {
	fake, cfg := newFake(t)
	// Raw request without X-API-Key: 401 and a recorded deviation.
	c := newClient(t, cfg)
	fake.SetFaults(e2bfake.Faults{Delay: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Create(ctx, e2bapi.CreateRequest{TemplateID: "base"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("delayed create: %v", err)
	}
	fake.SetFaults(e2bfake.Faults{})
	resp, err := httpGet(fake.APIURL() + "/v2/sandboxes")
	if err != nil || resp != 401 {
		t.Fatalf("no key: %d, %v", resp, err)
	}
	if len(fake.Deviations()) != 1 {
		t.Fatalf("deviations = %v, want the missing key", fake.Deviations())
	}
	fake.ResetDeviations()
}
