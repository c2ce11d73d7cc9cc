package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.yaml.in/yaml/v3"

	"github.com/sandboxio/sandboxio/services/router"
)

// TestNatsServerCommand runs `sandboxio nats-server` as a single node,
// talks JetStream to it and reads its monitoring endpoint, then stops it.
func TestNatsServerCommand(t *testing.T) {
	addr, mon := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, "sandboxio", []string{"nats-server", "--listen", addr, "--store-dir", t.TempDir(),
			"--server-name", "solo", "--monitor", mon, "--log-level", "error"}, &out, &errb)
	}()
	var nc *nats.Conn
	deadline := time.Now().Add(15 * time.Second)
	for {
		var err error
		if nc, err = nats.Connect("nats://" + addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server never accepted a connection: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling, with a deadline
	}
	defer nc.Close()
	if got := nc.ConnectedServerName(); got != "solo" {
		t.Errorf("server name %q, want solo", got)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithTimeout(ctx, 5*time.Second)
	defer acancel()
	if _, err := js.AccountInfo(actx); err != nil {
		t.Fatalf("JetStream: %v", err)
	}
	resp, err := http.Get("http://" + mon + "/healthz")
	if err != nil {
		t.Fatalf("monitor: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %s", resp.Status)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("nats-server did not stop within 15s of cancellation")
	}
}

func TestNatsServerFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"routes without cluster name", []string{"--routes", "nats-route://a:6222,nats-route://b:6222"}, "--cluster-name"},
		{"cluster name without routes", []string{"--cluster-name", "c"}, "--routes"},
		{"bad route scheme", []string{"--cluster-name", "c", "--routes", "http://a:6222"}, "nats-route://"},
		{"route without port", []string{"--cluster-name", "c", "--routes", "nats-route://a"}, "nats-route://"},
		{"bad listen", []string{"--listen", "4222"}, "--listen"},
		{"bad monitor port", []string{"--monitor", "0.0.0.0:http"}, "--monitor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"nats-server", "--store-dir", t.TempDir(), "--listen", "127.0.0.1:-1"}, tc.args...)
			code := run(context.Background(), "sandboxio", args, &out, &errb)
			if code != exitUsage || !strings.Contains(errb.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d mentioning %q", code, errb.String(), exitUsage, tc.want)
			}
		})
	}
}

// checkArgs parses a container's command line with the real CLI (adding
// --help, so nothing runs): an unknown flag or command fails.
func checkArgs(t *testing.T, where string, args []string) {
	t.Helper()
	if len(args) == 0 {
		t.Errorf("%s: no command", where)
		return
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), "sandboxio", append(slices.Clone(args), "--help"), &out, &errb); code != 0 {
		t.Errorf("%s: sandboxio %s: exit %d: %s", where, strings.Join(args, " "), code, errb.String())
	}
	if strings.Contains(out.String(), "Available Commands:") {
		t.Errorf("%s: %q is not a leaf command", where, args[0])
	}
}

// flagValue returns the value of --name in args (--name=v or --name v).
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// hasReplicasFlag reports whether the role takes --replicas.
func hasReplicasFlag(role string) bool {
	return role == "router" || role == "reaper" || strings.HasSuffix(role, "-worker")
}

func readDeploy(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDeployCompose checks deploy/compose.yaml: every service runs the
// sandboxio image with a command the CLI accepts, on all three NATS nodes,
// with three replicas where the role takes them; the routing file parses.
func TestDeployCompose(t *testing.T) {
	var f struct {
		Services map[string]struct {
			Image   string   `yaml:"image"`
			Command []string `yaml:"command"`
			Volumes []string `yaml:"volumes"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(readDeploy(t, "compose.yaml"), &f); err != nil {
		t.Fatal(err)
	}
	if _, err := router.ParseRouting(readDeploy(t, "routing.yaml")); err != nil {
		t.Fatalf("deploy/routing.yaml: %v", err)
	}
	nodes := []string{"n1", "n2", "n3"}
	wantNats := "nats://n1:4222,nats://n2:4222,nats://n3:4222"
	roles := map[string]int{}
	for name, s := range f.Services {
		where := "compose " + name
		if s.Image != "sandboxio/sandboxio:dev" {
			t.Errorf("%s: image %q", where, s.Image)
		}
		checkArgs(t, where, s.Command)
		if len(s.Command) == 0 {
			continue
		}
		role := s.Command[0]
		roles[role]++
		if role == "auth" || role == "tenant" {
			// The one-shot init steps write the layout into the auth volume.
			if !slices.Contains(s.Volumes, "auth:/data") {
				t.Errorf("%s: the auth volume is not mounted at /data", where)
			}
			if v, _ := flagValue(s.Command, "dir"); v != "/data" {
				t.Errorf("%s: --dir %q, want /data", where, v)
			}
			continue
		}
		if !slices.Contains(s.Volumes, "auth:/auth:ro") {
			t.Errorf("%s: the auth volume is not mounted read-only at /auth", where)
		}
		if role == "bus" {
			// The one-shot bus set-up runs as the admin: no service may
			// create or change a stream (ADR 35).
			if v, _ := flagValue(s.Command, "creds"); v != "/auth/creds/admin.creds" {
				t.Errorf("%s: --creds %q, want /auth/creds/admin.creds", where, v)
			}
			if v, _ := flagValue(s.Command, "replicas"); v != "3" {
				t.Errorf("%s: --replicas %q, want 3", where, v)
			}
			continue
		}
		if role == "auditor" {
			if v, _ := flagValue(s.Command, "signing-key"); v != "/auth/keys/signing-auditor.nk" {
				t.Errorf("%s: --signing-key %q: the auditor's checkpoints need the layout's key (ADR 36)", where, v)
			}
		}
		checkComposeAuth(t, where, role, s.Command)
		if role == "nats-server" {
			if !slices.Contains(nodes, name) {
				t.Errorf("%s: a NATS node not named n1..n3", where)
			}
			if v, _ := flagValue(s.Command, "server-name"); v != name {
				t.Errorf("%s: --server-name %q, want %q", where, v, name)
			}
			if v, _ := flagValue(s.Command, "routes"); v != "nats-route://n1:6222,nats-route://n2:6222,nats-route://n3:6222" {
				t.Errorf("%s: --routes %q", where, v)
			}
			continue
		}
		if v, _ := flagValue(s.Command, "nats"); v != wantNats {
			t.Errorf("%s: --nats %q, want %q", where, v, wantNats)
		}
		if v, ok := flagValue(s.Command, "replicas"); hasReplicasFlag(role) && v != "3" {
			t.Errorf("%s: --replicas %q (ok %v), want 3", where, v, ok)
		}
		if role == "docker-worker" && !slices.Contains(s.Volumes, "/var/run/docker.sock:/var/run/docker.sock") {
			t.Errorf("%s: the host Docker socket is not mounted", where)
		}
	}
	want := map[string]int{"nats-server": 3, "router": 2, "docker-worker": 1, "fake-worker": 1, "auditor": 1, "reaper": 1,
		"auth": 1, "tenant": 1, "bus": 1}
	if !reflect.DeepEqual(roles, want) {
		t.Errorf("roles %v, want %v", roles, want)
	}
}

// checkComposeAuth: each role runs authenticated with its own creds (and
// keys); every NATS node loads the layout's configuration. dir is where
// the layout is mounted.
func checkComposeAuth(t *testing.T, where, role string, args []string) {
	t.Helper()
	checkRoleAuth(t, where, role, args, "/auth")
}

func checkRoleAuth(t *testing.T, where, role string, args []string, dir string) {
	t.Helper()
	if role == "nats-server" {
		if v, _ := flagValue(args, "config"); v != dir+"/nats-server.conf" {
			t.Errorf("%s: --config %q, want %s/nats-server.conf", where, v, dir)
		}
		return
	}
	user := role
	if strings.HasSuffix(role, "-worker") {
		user = "worker"
		backend := strings.TrimSuffix(role, "-worker")
		if v, _ := flagValue(args, "seal-key"); v != dir+"/keys/seal.xk" {
			t.Errorf("%s: --seal-key %q", where, v)
		}
		if v, _ := flagValue(args, "signing-key"); v != dir+"/keys/signing-"+backend+".nk" {
			t.Errorf("%s: --signing-key %q", where, v)
		}
		if v, _ := flagValue(args, "trusted-commanders"); v != dir+"/keys/commanders.txt" {
			t.Errorf("%s: --trusted-commanders %q", where, v)
		}
	}
	// The router and the reaper sign their commands with the keys listed in
	// commanders.txt.
	if role == "router" || role == "reaper" {
		if v, _ := flagValue(args, "signing-key"); v != dir+"/keys/signing-"+role+".nk" {
			t.Errorf("%s: --signing-key %q", where, v)
		}
	}
	if role == "auditor" {
		if v, _ := flagValue(args, "trusted-signers"); v != dir+"/keys/signers.txt" {
			t.Errorf("%s: --trusted-signers %q", where, v)
		}
	}
	if v, _ := flagValue(args, "creds"); v != dir+"/creds/"+user+".creds" {
		t.Errorf("%s: --creds %q, want %s/creds/%s.creds", where, v, dir, user)
	}
}

type k8sContainer struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Env   []struct {
		Name string `yaml:"name"`
	} `yaml:"env"`
	VolumeMounts []struct {
		Name string `yaml:"name"`
	} `yaml:"volumeMounts"`
}

type k8sDoc struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Replicas    *int   `yaml:"replicas"`
		ServiceName string `yaml:"serviceName"`
		ClusterIP   string `yaml:"clusterIP"`
		Selector    struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				Containers []k8sContainer `yaml:"containers"`
				Volumes    []struct {
					Name      string `yaml:"name"`
					ConfigMap *struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
					Secret *struct {
						SecretName string `yaml:"secretName"`
						Items      []struct {
							Key  string `yaml:"key"`
							Path string `yaml:"path"`
						} `yaml:"items"`
					} `yaml:"secret"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
	} `yaml:"spec"`
}

var k8sVar = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// TestDeployKubernetes checks deploy/k8s/*.yaml: every document is a named
// object in namespace sandboxio; workloads select their own pods, run the
// sandboxio image with a command the CLI accepts (every $(VAR) declared),
// mount only volumes they define, and reach the NATS StatefulSet's three
// pods; the routing ConfigMap parses and matches deploy/routing.yaml.
func TestDeployKubernetes(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "deploy", "k8s", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var docs []k8sDoc
	for _, path := range files {
		dec := yaml.NewDecoder(bytes.NewReader(must(os.ReadFile(path))))
		for i := 0; ; i++ {
			var d k8sDoc
			if err := dec.Decode(&d); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s: document %d: %v", path, i, err)
			}
			if d.APIVersion == "" || d.Kind == "" || d.Metadata.Name == "" {
				t.Errorf("%s: document %d lacks apiVersion, kind or metadata.name", path, i)
			}
			if d.Kind != "Namespace" && d.Metadata.Namespace != "sandboxio" {
				t.Errorf("%s: %s/%s not in namespace sandboxio", path, d.Kind, d.Metadata.Name)
			}
			docs = append(docs, d)
		}
	}
	byKind := map[string]map[string]k8sDoc{}
	for _, d := range docs {
		if byKind[d.Kind] == nil {
			byKind[d.Kind] = map[string]k8sDoc{}
		}
		byKind[d.Kind][d.Metadata.Name] = d
	}

	// NATS: a StatefulSet behind a headless Service; its pods' DNS names.
	sts, ok := byKind["StatefulSet"]["sandboxio-nats"]
	if !ok || sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Fatalf("want StatefulSet sandboxio-nats with 3 replicas")
	}
	if svc := byKind["Service"][sts.Spec.ServiceName]; svc.Spec.ClusterIP != "None" {
		t.Errorf("StatefulSet service %q is not headless", sts.Spec.ServiceName)
	}
	var routes, natsURLs []string
	for i := range 3 {
		host := fmt.Sprintf("%s-%d.%s", sts.Metadata.Name, i, sts.Spec.ServiceName)
		routes = append(routes, "nats-route://"+host+":6222")
		natsURLs = append(natsURLs, "nats://"+host+":4222")
	}

	secrets := k8sAuthSecrets(t)
	roles := map[string]string{}
	for _, kind := range []string{"StatefulSet", "Deployment", "DaemonSet"} {
		for name, d := range byKind[kind] {
			where := kind + "/" + name
			for k, v := range d.Spec.Selector.MatchLabels {
				if d.Spec.Template.Metadata.Labels[k] != v {
					t.Errorf("%s: selector %s=%s does not match the pod labels", where, k, v)
				}
			}
			if len(d.Spec.Selector.MatchLabels) == 0 {
				t.Errorf("%s: empty selector", where)
			}
			vols := map[string]bool{}
			secretFiles := map[string]bool{} // paths under /etc/sandboxio/auth
			for _, v := range d.Spec.Template.Spec.Volumes {
				vols[v.Name] = true
				if v.Secret != nil {
					keys, ok := secrets[v.Secret.SecretName]
					if !ok {
						t.Errorf("%s: Secret %q is not made by deploy/k8s/auth-init.sh", where, v.Secret.SecretName)
					}
					for _, it := range v.Secret.Items {
						if !keys[it.Key] {
							t.Errorf("%s: Secret %s has no key %q (deploy/k8s/auth-init.sh)", where, v.Secret.SecretName, it.Key)
						}
						secretFiles["/etc/sandboxio/auth/"+it.Path] = true
					}
				}
				if v.ConfigMap != nil {
					if _, ok := byKind["ConfigMap"][v.ConfigMap.Name]; !ok {
						t.Errorf("%s: ConfigMap %q is not defined", where, v.ConfigMap.Name)
					}
				}
			}
			for _, v := range d.Spec.VolumeClaimTemplates {
				vols[v.Metadata.Name] = true
			}
			for _, c := range d.Spec.Template.Spec.Containers {
				cw := where + " container " + c.Name
				if c.Image != "sandboxio/sandboxio:dev" {
					t.Errorf("%s: image %q", cw, c.Image)
				}
				for _, m := range c.VolumeMounts {
					if !vols[m.Name] {
						t.Errorf("%s: mounts undefined volume %q", cw, m.Name)
					}
				}
				env := map[string]bool{}
				for _, e := range c.Env {
					env[e.Name] = true
				}
				var args []string
				for _, a := range c.Args {
					for _, m := range k8sVar.FindAllStringSubmatch(a, -1) {
						if !env[m[1]] {
							t.Errorf("%s: $(%s) is not in the container's env", cw, m[1])
						}
					}
					args = append(args, k8sVar.ReplaceAllString(a, "sandboxio-nats-0"))
				}
				checkArgs(t, cw, args)
				if len(args) == 0 {
					continue
				}
				role := args[0]
				roles[role] = kind
				checkRoleAuth(t, cw, role, args, "/etc/sandboxio/auth")
				for _, a := range args {
					if _, p, ok := strings.Cut(a, "="); ok && strings.HasPrefix(p, "/etc/sandboxio/auth/") && !secretFiles[p] {
						t.Errorf("%s: %s is in no Secret item of the pod", cw, a)
					}
				}
				if role == "nats-server" {
					if v, _ := flagValue(args, "routes"); v != strings.Join(routes, ",") {
						t.Errorf("%s: --routes %q, want %q", cw, v, strings.Join(routes, ","))
					}
					continue
				}
				if v, _ := flagValue(args, "nats"); v != strings.Join(natsURLs, ",") {
					t.Errorf("%s: --nats %q, want %q", cw, v, strings.Join(natsURLs, ","))
				}
				if v, _ := flagValue(args, "replicas"); hasReplicasFlag(role) && v != "3" {
					t.Errorf("%s: --replicas %q, want 3", cw, v)
				}
			}
		}
	}
	want := map[string]string{"nats-server": "StatefulSet", "router": "Deployment", "auditor": "Deployment",
		"reaper": "Deployment", "docker-worker": "DaemonSet"}
	if !reflect.DeepEqual(roles, want) {
		t.Errorf("roles %v, want %v", roles, want)
	}

	cm, ok := byKind["ConfigMap"]["sandboxio-routing"]
	if !ok {
		t.Fatal("no ConfigMap sandboxio-routing")
	}
	got, err := router.ParseRouting([]byte(cm.Data["routing.yaml"]))
	if err != nil {
		t.Fatalf("ConfigMap sandboxio-routing: %v", err)
	}
	want2, err := router.ParseRouting(readDeploy(t, "routing.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want2) {
		t.Errorf("the routing ConfigMap differs from deploy/routing.yaml")
	}
}

// k8sAuthSecrets reads the Secrets deploy/k8s/auth-init.sh makes: name
// -> keys.
func k8sAuthSecrets(t *testing.T) map[string]map[string]bool {
	t.Helper()
	script := strings.ReplaceAll(string(readDeploy(t, "k8s/auth-init.sh")), "\\\n", " ")
	out := map[string]map[string]bool{}
	for _, line := range strings.Split(script, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "secret" {
			continue
		}
		keys := map[string]bool{}
		for _, kv := range f[2:] {
			if k, _, ok := strings.Cut(kv, "="); ok {
				keys[k] = true
			}
		}
		out[f[1]] = keys
	}
	if len(out) != 5 {
		t.Fatalf("deploy/k8s/auth-init.sh makes Secrets %v, want 5", out)
	}
	return out
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
