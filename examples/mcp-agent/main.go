// Command mcp-agent is a worked agent loop over `sandboxio mcp`: it starts
// the MCP server as a host does (stdio), lists its tools, and runs the
// loop every agent runs — the model picks a tool call, the host makes it,
// the result goes back into the model's context — until the model answers.
//
// The model here is scripted (no API key needed) so that the loop runs
// anywhere; replace scriptedModel with a call to your LLM, passing it the
// tool list (name, description, input schema) and the transcript.
//
//	go run ./examples/mcp-agent                      # sandboxio on PATH, dev running
//	go run ./examples/mcp-agent -sandboxio bin/sandboxio -class fake
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// turn is one step of the transcript the model sees.
type turn struct {
	call   *mcp.CallToolParams
	result string
	isErr  bool
}

// model decides the next tool call from the transcript, or answers.
type model interface {
	next(tools []*mcp.Tool, transcript []turn) (call *mcp.CallToolParams, answer string)
}

func main() {
	bin := flag.String("sandboxio", "sandboxio", "the sandboxio binary")
	class := flag.String("class", "", "sandbox class (default: the deployment's default)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	server := exec.Command(*bin, "--log-level", "warn", "mcp")
	server.Stderr = os.Stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "mcp-agent", Version: "1"}, nil)
	session, err := client.Connect(ctx, &mcp.CommandTransport{Command: server}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close() // ends the session: the server kills its sandboxes

	tools, err := session.ListTools(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	names := make([]string, 0, len(tools.Tools))
	for _, t := range tools.Tools {
		names = append(names, t.Name)
	}
	fmt.Printf("tools: %s\n\n", strings.Join(names, ", "))

	var m model = &scriptedModel{class: *class}
	var transcript []turn
	for step := 0; step < 20; step++ { // a bound on the loop, as every agent needs
		call, answer := m.next(tools.Tools, transcript)
		if call == nil {
			fmt.Printf("model: %s\n", answer)
			return
		}
		fmt.Printf("→ %s %s\n", call.Name, args(call.Arguments))
		res, err := session.CallTool(ctx, call)
		if err != nil {
			log.Fatal(err) // a protocol failure; tool errors come back in res
		}
		text := textOf(res)
		fmt.Printf("← %s%s\n", indent(text), map[bool]string{true: "   (tool error)\n", false: ""}[res.IsError])
		transcript = append(transcript, turn{call: call, result: text, isErr: res.IsError})
	}
	log.Fatal("the model did not finish within 20 steps")
}

func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			b.WriteString(c.Text)
		case *mcp.ImageContent:
			fmt.Fprintf(&b, "[image %s, %d bytes]\n", c.MIMEType, len(c.Data))
		}
	}
	return b.String()
}

func args(a any) string {
	s := fmt.Sprint(a)
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return strings.ReplaceAll(s, "\n", "\n  ") + "\n"
}

// scriptedModel plays a model that was asked "what is fib(30), and how
// long does it take in Python?": it plans its calls from what the tools
// answered before, as a real model would read them.
type scriptedModel struct {
	class string
	id    string
}

func (m *scriptedModel) next(_ []*mcp.Tool, tr []turn) (*mcp.CallToolParams, string) {
	call := func(name string, a map[string]any) (*mcp.CallToolParams, string) {
		return &mcp.CallToolParams{Name: name, Arguments: a}, ""
	}
	if len(tr) > 0 && tr[0].call.Name == "create_sandbox" && m.id == "" {
		for _, line := range strings.Split(tr[0].result, "\n") {
			if id, ok := strings.CutPrefix(line, "sandbox_id: "); ok {
				m.id = id
			}
		}
	}
	script := `import time
def fib(n): return n if n < 2 else fib(n-1) + fib(n-2)
t = time.time(); print("fib(30) =", fib(30)); print("took %.2fs" % (time.time() - t))
`
	switch len(tr) {
	case 0:
		a := map[string]any{"lifetime": "10m"}
		if m.class != "" {
			a["class"] = m.class
		}
		return call("create_sandbox", a)
	case 1:
		if tr[0].isErr {
			return nil, "I could not get a sandbox: " + tr[0].result
		}
		return call("write_file", map[string]any{"sandbox_id": m.id, "path": "/work/fib.py", "content": script})
	case 2:
		return call("run_command", map[string]any{"sandbox_id": m.id, "command": "python3 /work/fib.py", "timeout": 60})
	case 3:
		return call("run_code", map[string]any{"sandbox_id": m.id, "code": "import sys; print(sys.version.split()[0])"})
	case 4:
		return call("list_files", map[string]any{"sandbox_id": m.id, "path": "/work"})
	case 5: // a mistake a model makes: the error says what to do
		return call("read_file", map[string]any{"sandbox_id": m.id, "path": "/work/result.txt"})
	case 6:
		return call("run_command", map[string]any{"sandbox_id": m.id, "argv": []string{"sleep", "30"}, "timeout": "1s"})
	case 7:
		return call("kill_sandbox", map[string]any{"sandbox_id": m.id})
	}
	for _, t := range tr {
		if t.call.Name == "run_command" && strings.Contains(t.result, "fib(30) =") {
			var facts []string
			for _, line := range strings.Split(t.result, "\n") {
				if strings.HasPrefix(line, "fib(30)") || strings.HasPrefix(line, "took") {
					facts = append(facts, strings.TrimSpace(line))
				}
			}
			return nil, strings.Join(facts, "; ") + " (measured in a sandbox)"
		}
	}
	return nil, "done"
}
