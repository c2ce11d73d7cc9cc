package modalapi

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigFromEnv(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, ".modal.toml")
	if err := os.WriteFile(file, []byte(`[default]
token_id = "ak-default"
token_secret = "as-default"

[work]
token_id = "ak-work"   # the work profile
token_secret = 'as-work'
server_url = "http://127.0.0.1:1"
environment = "staging"
active = true
`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  map[string]string
		want Config
	}{
		{"active profile", map[string]string{"HOME": dir},
			Config{ServerURL: "http://127.0.0.1:1", TokenID: "ak-work", TokenSecret: "as-work", Environment: "staging", Profile: "work"}},
		{"MODAL_PROFILE wins over active", map[string]string{"HOME": dir, EnvProfile: "default"},
			Config{ServerURL: DefaultServerURL, TokenID: "ak-default", TokenSecret: "as-default", Profile: "default"}},
		{"env vars win over the file", map[string]string{"HOME": dir, EnvTokenID: "ak-env", EnvTokenSecret: "as-env", EnvEnvironment: "prod", EnvMaxThrottleWait: "2.5"},
			Config{ServerURL: "http://127.0.0.1:1", TokenID: "ak-env", TokenSecret: "as-env", Environment: "prod", Profile: "work", MaxThrottleWait: 2500 * time.Millisecond}},
		{"MODAL_CONFIG_PATH and no file", map[string]string{EnvConfigPath: filepath.Join(dir, "missing.toml"), EnvTokenID: "ak-1", EnvTokenSecret: "as-1", EnvMaxThrottleWait: "0"},
			Config{ServerURL: DefaultServerURL, TokenID: "ak-1", TokenSecret: "as-1", MaxThrottleWait: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ConfigFromEnv(func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	if _, err := ConfigFromEnv(func(k string) string { return map[string]string{"HOME": dir, EnvProfile: "nope"}[k] }); err == nil {
		t.Fatal("an unknown MODAL_PROFILE is not an error")
	}
}

func TestConfigNeverLogsTokens(t *testing.T) {
	c := Config{ServerURL: "https://api.modal.com:443", TokenID: "ak-secretid", TokenSecret: "as-secretsecret"}
	var sb strings.Builder
	slog.New(slog.NewTextHandler(&sb, nil)).Info("x", "cfg", c)
	out := sb.String() + c.String() + fmt.Sprint(c.LogValue())
	if strings.Contains(out, "ak-secretid") || strings.Contains(out, "as-secretsecret") || !strings.Contains(out, "token_set=true") {
		t.Fatalf("config output: %s", out)
	}
}

func TestJWTClaims(t *testing.T) {
	tests := []struct {
		tok string
		ok  bool
		exp int64
	}{
		{"e30.eyJleHAiOjE3MDAwMDAwMDB9.sig", true, 1700000000},
		{"e30.e30.sig", true, 0},
		{"fake-jwt-token", false, 0},
		{"e30.eyJleHAiOjEuNX0.sig", false, 0}, // exp 1.5
		{"e30.!!!.sig", false, 0},
	}
	for _, tc := range tests {
		claims, err := JWTClaims(tc.tok)
		if (err == nil) != tc.ok {
			t.Fatalf("%s: %v", tc.tok, err)
		}
		if exp, ok := JWTExpiry(tc.tok); tc.exp != 0 && (!ok || exp.Unix() != tc.exp) {
			t.Fatalf("%s: exp %v %v (%v)", tc.tok, exp, ok, claims)
		}
	}
	if u := NewUUID(); len(u) != 36 || u[14] != '4' {
		t.Fatalf("uuid %s", u)
	}
}
