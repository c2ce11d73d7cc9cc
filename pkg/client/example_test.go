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

// A tenant connects with the creds file its operator gave it, writes a
// file larger than one request into a sandbox and reads it back.
// (Compiled, not run: it needs an authenticated deployment.)
func ExampleConnect_tenant() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := client.Connect("nats://sandboxio.example:4222", client.WithCreds("tenant-a.creds"),
		client.WithTLS("ca.pem", "", ""))
	if err != nil {
		log.Fatal(err) // names the creds file when the server refuses it
	}
	defer cl.Close()
	fmt.Println("tenant", cl.Tenant())

	sb, err := cl.Create(ctx, events.CreateRequest{TimeoutS: 300, Secrets: map[string]string{"API_KEY": os.Getenv("API_KEY")}})
	if err != nil {
		log.Fatal(err) // SBX_E1403 QuotaExceeded when the tenant is at a quota
	}
	defer cl.Kill(context.Background(), sb.SandboxID)
	data := make([]byte, 2<<20)
	if err := cl.WriteFile(ctx, sb.SandboxID, "/tmp/data.bin", data, 0o644); err != nil {
		log.Fatal(err)
	}
	back, err := cl.ReadFile(ctx, sb.SandboxID, "/tmp/data.bin")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(back), "bytes")
}
