package mcpserver_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"go.yaml.in/yaml/v3"
)

var fence = regexp.MustCompile("(?ms)^```([a-z]*)\n(.*?)^```")

// TestAgentsDocSnippets: every JSON, YAML and TOML block of docs/agents.md
// parses, and each host configuration starts `sandboxio mcp` (or names its
// HTTP endpoint); the Python blocks compile where python3 is installed.
func TestAgentsDocSnippets(t *testing.T) {
	doc, err := os.ReadFile("../../docs/agents.md")
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	var python []string
	for i, m := range fence.FindAllSubmatch(doc, -1) {
		lang, body := string(m[1]), m[2]
		var v any
		switch lang {
		case "json":
			err = json.Unmarshal(body, &v)
		case "yaml":
			err = yaml.Unmarshal(body, &v)
		case "toml":
			err = toml.Unmarshal(body, &v)
		case "python":
			python = append(python, string(body))
			continue
		default:
			continue
		}
		counts[lang]++
		if err != nil {
			t.Errorf("block %d (%s) does not parse: %v\n%s", i, lang, err, body)
			continue
		}
		if !startsServer(v) {
			t.Errorf("block %d (%s) neither runs `sandboxio mcp` nor names an /mcp URL:\n%s", i, lang, body)
		}
	}
	if counts["json"] < 5 || counts["yaml"] < 2 || counts["toml"] < 1 {
		t.Fatalf("found %v config blocks: fewer than the doc has", counts)
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Log("python3 not installed: the Python blocks are not compiled")
		return
	}
	for i, src := range python {
		f := filepath.Join(t.TempDir(), "snippet.py")
		if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(py, "-m", "py_compile", f).CombinedOutput(); err != nil {
			t.Errorf("Python block %d does not compile: %v\n%s\n%s", i, err, out, src)
		}
	}
}

// startsServer looks through a parsed config for an "mcp" argument next
// to a sandboxio command, or a URL ending in /mcp.
func startsServer(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		cmd := ""
		for _, k := range []string{"command", "cmd"} {
			if s, ok := x[k].(string); ok {
				cmd = s
			}
		}
		if strings.HasSuffix(cmd, "sandboxio") && hasMCPArg(x["args"]) {
			return true
		}
		for _, k := range []string{"url", "serverUrl"} {
			if s, ok := x[k].(string); ok && strings.HasSuffix(s, "/mcp") {
				return true
			}
		}
		if c, ok := x["command"].([]any); ok && hasMCPArg(c) { // compose: command: ["mcp", …]
			return true
		}
		for _, e := range x {
			if startsServer(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if startsServer(e) {
				return true
			}
		}
	}
	return false
}

func hasMCPArg(v any) bool {
	args, ok := v.([]any)
	return ok && len(args) > 0 && args[0] == "mcp"
}
