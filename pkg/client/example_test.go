package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// The examples run against the system the tests start (the fake backend,
// whose commands include echo, cat, sleep and exit); with `sandboxio dev`
// listening they run unchanged against Docker.

// Create a sandbox, run a command in it, and remove it.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := client.Connect("") // SBX_NATS_URL, else nats://127.0.0.1:4222
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()

	sb, err := cl.Create(ctx, events.CreateRequest{}, client.WithLifetime(5*time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(context.Background())

	res, err := sb.Exec(ctx, []string{"echo", "hello from", sb.Backend})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%sexit %d\n", res.Stdout, res.ExitCode)
	// Output:
	// hello from fake
	// exit 0
}

// Create a sandbox of a class with a lifetime, an environment and
// metadata; the handle carries what the server answered.
func ExampleClient_Create() {
	ctx := context.Background()
	cl, err := client.Connect("")
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()

	sb, err := cl.Create(ctx, events.CreateRequest{
		Class:    "fake", // a class of the routing file; "" is the default class
		Env:      map[string]string{"GREETING": "hi"},
		Metadata: map[string]string{"agent": "example"},
	}, client.WithLifetime(10*time.Minute), client.WithProgress(func(msg string) { log.Print(msg) }))
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(ctx)
	fmt.Println("backend:", sb.Backend, "class:", sb.Class)
	fmt.Println("lifetime about 10m:", time.Until(sb.Deadline).Round(time.Minute))
	res, _ := sb.Exec(ctx, []string{"env", "GREETING"})
	fmt.Print(string(res.Stdout))
	// Output:
	// backend: fake class: fake
	// lifetime about 10m: 10m0s
	// hi
}

// A command that runs past its timeout is killed; the error is
// ExecutionTimeout (of the SandboxTimeout family) with what it wrote.
func ExampleSandbox_Exec_timeout() {
	ctx := context.Background()
	cl, err := client.Connect("")
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	sb, err := cl.Create(ctx, events.CreateRequest{}, client.WithLifetime(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(ctx)

	_, err = sb.Exec(ctx, []string{"sleep", "60000"}, client.Timeout(200*time.Millisecond))
	fmt.Println("timed out:", errors.Is(err, events.ErrSandboxTimeout))
	fmt.Println("execution timeout:", errors.Is(err, events.ErrExecutionTimeout))
	fmt.Println("retry as is:", client.Retryable(err))
	// Output:
	// timed out: true
	// execution timeout: true
	// retry as is: false
}

// Stream a command's output as it is written, with input on its stdin.
func ExampleSandbox_Stream() {
	ctx := context.Background()
	cl, err := client.Connect("")
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	sb, err := cl.Create(ctx, events.CreateRequest{}, client.WithLifetime(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(ctx)

	p, err := sb.Stream(ctx, []string{"cat"}, client.Stdin([]byte("line one\nline two\n")))
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
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit", res.ExitCode)
	// Output:
	// line one
	// line two
	// exit 0
}

// Run code in the sandbox's interpreter. (Code.Context names a context
// whose state — variables, imports — later runs share, where the backend
// keeps state: the backend advertises events.CapStatefulCode.)
func ExampleSandbox_RunCode() {
	ctx := context.Background()
	cl, err := client.Connect("")
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	sb, err := cl.Create(ctx, events.CreateRequest{}, client.WithLifetime(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(ctx)

	r, err := sb.RunCode(ctx, client.Code{Language: "python", Code: "x = 6 * 7", Timeout: 30 * time.Second})
	if err != nil {
		log.Fatal(err) // the sandbox or the request failed
	}
	if r.Error != nil {
		fmt.Println("the code raised", r.Error.Name) // an exception is a result
	}
	fmt.Println("exit", r.ExitCode, "raised:", r.Error != nil)
	// Output:
	// exit 0 raised: false
}

// Write a file larger than one request, read it back, list its
// directory, remove it. The handle moves large files in parts.
func ExampleFiles() {
	ctx := context.Background()
	cl, err := client.Connect("")
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	sb, err := cl.Create(ctx, events.CreateRequest{}, client.WithLifetime(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(ctx)
	files := sb.Files()

	data := bytes.Repeat([]byte{0, 1, 2, 0xff}, 512<<10) // 2 MiB of binary
	if err := files.Write(ctx, "/work/data.bin", data, 0o644); err != nil {
		log.Fatal(err)
	}
	back, err := files.Read(ctx, "/work/data.bin")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("read back intact:", bytes.Equal(back, data))
	entries, err := files.List(ctx, "/work")
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries {
		fmt.Println(e.Name, e.Size, e.FileMode().Perm())
	}
	if err := files.Remove(ctx, "/work/data.bin"); err != nil {
		log.Fatal(err)
	}
	_, err = files.Read(ctx, "/work/data.bin")
	fmt.Println("gone:", errors.Is(err, events.ErrFileNotFound))
	// Output:
	// read back intact: true
	// data.bin 2097152 -rw-r--r--
	// gone: true
}

// Extend a sandbox's lifetime, then find it again by id (from another
// process, say) and remove it.
func ExampleSandbox_SetTimeout() {
	ctx := context.Background()
	cl, err := client.Connect("")
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	sb, err := cl.Create(ctx, events.CreateRequest{}, client.WithLifetime(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	deadline, err := sb.SetTimeout(ctx, time.Hour)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("an hour left:", time.Until(deadline).Round(time.Hour))

	again := cl.Sandbox(sb.ID()) // a handle from an id, no request
	info, err := again.Info(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("state:", info.State)
	if err := again.Kill(ctx); err != nil {
		log.Fatal(err)
	}
	_, err = again.Exec(ctx, []string{"echo"})
	fmt.Println("gone:", errors.Is(err, events.ErrSandboxGone))
	// Output:
	// an hour left: 1h0m0s
	// state: running
	// gone: true
}

// List the live sandboxes that carry a metadata label.
func ExampleClient_List() {
	ctx := context.Background()
	cl, err := client.Connect("")
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	sb, err := cl.Create(ctx, events.CreateRequest{Metadata: map[string]string{"team": "example-list"}}, client.WithLifetime(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(ctx)

	list, err := cl.List(ctx, events.ListRequest{Metadata: map[string]string{"team": "example-list"}})
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range list {
		fmt.Println(s.SandboxID == sb.ID(), s.Backend, s.State)
	}
	// Output:
	// true fake running
}

// A tenant connects with the creds file its operator gave it; secrets are
// sealed to the backend's workers before they leave the process.
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

	sb, err := cl.Create(ctx, events.CreateRequest{Secrets: map[string]string{"API_KEY": os.Getenv("API_KEY")}},
		client.WithLifetime(5*time.Minute))
	if errors.Is(err, events.ErrQuotaExceeded) {
		log.Fatal("at a quota: retry after other sandboxes end") // client.Retryable(err) is true
	}
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(context.Background())
}

// Talk to a running process on its stdin, then read its output again
// from the start with Attach (as another process, or after a reconnect).
func ExampleProcess_WriteStdin() {
	ctx := context.Background()
	cl, err := client.Connect("")
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	sb, err := cl.Create(ctx, events.CreateRequest{}, client.WithLifetime(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(ctx)

	p, err := sb.Stream(ctx, []string{"cat"}, client.KeepStdinOpen())
	if err != nil {
		log.Fatal(err)
	}
	if err := p.WriteStdin(ctx, []byte("typed in\n")); err != nil {
		log.Fatal(err)
	}
	if err := p.CloseStdin(ctx); err != nil { // end of file: cat exits
		log.Fatal(err)
	}
	for range p.Chunks() {
	}
	if _, err := p.Wait(); err != nil {
		log.Fatal(err)
	}

	again, err := sb.Attach(ctx, p.ProcessID)
	if err != nil {
		log.Fatal(err)
	}
	for chunk, err := range again.Chunks() {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %s", chunk.Stream, chunk.Data)
	}
	res, _ := again.Wait()
	fmt.Println("exit", res.ExitCode)
	// Output:
	// stdout: typed in
	// exit 0
}

// Retry what the catalog says may succeed later, with back-off; give up
// on the rest at once.
func ExampleRetryable() {
	ctx := context.Background()
	cl, err := client.Connect("")
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	var sb *client.Sandbox
	for attempt, wait := 1, 100*time.Millisecond; ; attempt, wait = attempt+1, wait*2 {
		sb, err = cl.Create(ctx, events.CreateRequest{Class: "broken"}, client.WithLifetime(time.Minute))
		if err == nil || !client.Retryable(err) || attempt == 5 {
			break
		}
		time.Sleep(wait) // SBX_E1103 no worker, SBX_E1403 quota, SBX_E1604 overloaded…
	}
	if err != nil {
		fmt.Println("gave up:", errors.Is(err, events.ErrCreateFailed), client.Retryable(err))
		return
	}
	defer sb.Kill(ctx)
	// Output:
	// gave up: true false
}
