package events

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The subject maps in doc.go and docs/architecture.md are written by hand;
// these tests hold them to the builders, so that a token added to a subject
// (as the tenant was) cannot leave a map behind.

func TestDocSubjectMapMatchesBuilders(t *testing.T) {
	doc := readDoc(t, "doc.go")
	for _, want := range []string{
		APISubject("<op>"),
		CreateSubject("<backend>"),
		NodeSubject("<backend>", "<worker>", "<verb>"),
		OpsSubject("<backend>", "<sandbox>", "<event>"),
		OutputSubject("<tenant>", "<sandbox>", "<process>", "<stream>"),
		LiveSubject("<tenant>", "<sandbox>", "<process>", "<stream>"),
		ProgressSubject("<tenant>", "<sandbox>"),
		ReplaySubject("<tenant>", "<nonce>"),
		TunnelOpenSubject("<backend>", "<worker>"),
		TunnelWorkerConnSubject("<backend>", "<worker>", "<conn>"),
		TunnelGatewaySubject("<gateway>", "<conn>"),
		"KV " + BucketRegistry, "KV " + BucketWorkers, "KV " + BucketIdempotency, "KV " + BucketTenants,
		"Object store " + BucketFiles,
	} {
		if !strings.Contains(doc, "//\t"+want+" ") {
			t.Errorf("doc.go's subject map has no line for %q", want)
		}
	}
}

func TestArchitectureSubjectMapMatchesBuilders(t *testing.T) {
	doc := readDoc(t, "../../docs/architecture.md")
	for _, want := range []string{
		APISubject("<op>"),
		CreateSubject("<b>"),
		NodeSubject("<b>", "<w>", "<verb>"),
		strings.TrimSuffix(OpsSubject("<b>", "<s>", ""), "."),
		strings.TrimSuffix(OutputSubject("<t>", "<s>", "<p>", ""), "."),
		"`" + BucketRegistry + "`", "`" + BucketWorkers + "`", "`" + BucketIdempotency + "`",
		"`" + BucketTenants + "`", "`" + BucketFiles + "`",
		"`" + StreamCommands + "`", "`" + StreamOps + "`", "`" + StreamOutput + "`",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/architecture.md never shows %q", want)
		}
	}
	// Output and live subjects carry the tenant as their first token
	// after the root: a map that shows another token there is stale.
	re := regexp.MustCompile(`sbx\.(out|live)\.<([a-z]+)>`)
	for _, m := range re.FindAllStringSubmatch(doc, -1) {
		if m[2] != "t" && m[2] != "tenant" {
			t.Errorf("docs/architecture.md shows %q: output subjects start with the tenant", m[0])
		}
	}
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
