package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// Create a sandbox, stream a command's output, and remove the sandbox.
// (Compiled, not run: it needs `sandboxio dev` listening.)
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := client.Connect("") // SBX_NATS_URL, else nats://127.0.0.1:4222
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()

	sb, err := cl.Create(ctx, events.CreateRequest{Class: "standard", TimeoutS: 300})
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Kill(context.Background(), sb.SandboxID)

	p, err := cl.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"python3", "-c", "print(6*7)"}})
	if err != nil {
		log.Fatal(err)
	}
	for chunk, err := range p.Chunks() {
		if err != nil {
			log.Fatal(err)
		}
		if chunk.Stream == events.Stderr {
			os.Stderr.Write(chunk.Data)
		} else {
			os.Stdout.Write(chunk.Data)
		}
	}
	res, err := p.Wait()
	switch {
	case errors.Is(err, events.ErrSandboxTimeout):
		fmt.Println("timed out")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("exit code", res.ExitCode)
	}
}
