package dockerworker

import (
	"fmt"
	"strings"

	"github.com/distribution/reference"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// BuiltImages are the images deploy/images/build.sh makes; with the default
// image and the pools' images they are the default image allowlist.
var BuiltImages = []string{"sandboxio/base:latest", "sandboxio/python:3.11", "sandboxio/python:latest",
	"sandboxio/python-data:3.11", "sandboxio/python-data:latest"}

// imagePolicy is the operator's image allowlist. An entry is a repository
// with a tag ("sandboxio/python:3.11"), with a digest
// ("alpine@sha256:…"), a bare repository (any tag or digest of it), or a
// prefix ending in "/*" (every repository under it).
type imagePolicy struct {
	exact    map[string]bool // normalized name:tag or name@digest
	repos    map[string]bool // normalized names
	prefixes []string        // normalized "domain/path/" prefixes
}

// imageAllowlist is the worker's allowlist: cfg.Images, and the default
// image and the pools' images as the exact images they name (a pool of
// "sandboxio/base" allows sandboxio/base:latest, not every tag of it).
func imageAllowlist(cfg Config) (*imagePolicy, error) {
	exact := []string{cfg.DefaultImage}
	for _, pc := range cfg.Pools {
		if pc.Image != "" {
			exact = append(exact, pc.Image)
		}
	}
	for i, ref := range exact {
		c, err := CanonicalImage(ref)
		if err != nil {
			return nil, fmt.Errorf("dockerworker: image %q (default or a pool's): %w", ref, err)
		}
		exact[i] = c
	}
	return newImagePolicy(append(exact, cfg.Images...))
}

func newImagePolicy(entries []string) (*imagePolicy, error) {
	p := &imagePolicy{exact: map[string]bool{}, repos: map[string]bool{}}
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if pre, ok := strings.CutSuffix(e, "/*"); ok {
			n, err := reference.ParseNormalizedNamed(pre)
			if err != nil || !reference.IsNameOnly(n) {
				return nil, fmt.Errorf("dockerworker: image allowlist entry %q: want REPOSITORY/*", e)
			}
			p.prefixes = append(p.prefixes, n.Name()+"/")
			continue
		}
		n, err := reference.ParseNormalizedNamed(e)
		if err != nil {
			return nil, fmt.Errorf("dockerworker: image allowlist entry %q: %w", e, err)
		}
		if reference.IsNameOnly(n) {
			p.repos[n.Name()] = true
			continue
		}
		p.exact[n.String()] = true
	}
	return p, nil
}

// CanonicalImage is the one form of an image reference the worker uses
// everywhere (pool shapes, the allowlist's answer, creates, its image
// cache): familiar (no "docker.io/" nor "library/"), with ":latest" when
// neither a tag nor a digest is named. "sandboxio/base",
// "sandboxio/base:latest" and "docker.io/sandboxio/base:latest" are one
// image. It parses with github.com/distribution/reference, Docker's own.
// A reference that does not parse is InvalidImageRef.
func CanonicalImage(ref string) (string, error) {
	n, err := parseImage(ref)
	if err != nil {
		return "", err
	}
	return reference.FamiliarString(n), nil
}

// parseImage parses and checks ref, tagged ":latest" when it names neither
// a tag nor a digest.
func parseImage(ref string) (reference.Named, error) {
	if len(ref) > 255 || strings.TrimSpace(ref) != ref || ref == "" {
		return nil, events.Errorf(events.CodeInvalidImageRef, "image reference %q is empty, too long or has spaces", truncRef(ref)).With("field", "image")
	}
	n, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return nil, events.Errorf(events.CodeInvalidImageRef, "image reference %q: %v", truncRef(ref), err).With("field", "image")
	}
	n = reference.TagNameOnly(n)
	if c, ok := n.(reference.Canonical); ok {
		if err := c.Digest().Validate(); err != nil {
			return nil, events.Errorf(events.CodeInvalidImageRef, "image reference %q: %v", truncRef(ref), err).With("field", "image")
		}
	}
	return n, nil
}

// check validates ref before the daemon is asked anything and returns its
// CanonicalImage form, the one to give the daemon. A ref outside the
// allowlist is ImageNotAllowed.
func (p *imagePolicy) check(ref string) (string, error) {
	n, err := parseImage(ref)
	if err != nil {
		return "", err
	}
	if !p.allows(n) {
		return "", events.Errorf(events.CodeImageNotAllowed, "image %s is not on this worker's image allowlist", reference.FamiliarString(n)).
			With("image", reference.FamiliarString(n))
	}
	return reference.FamiliarString(n), nil
}

func (p *imagePolicy) allows(n reference.Named) bool {
	ok := p.exact[n.String()] || p.repos[n.Name()]
	for _, pre := range p.prefixes {
		ok = ok || strings.HasPrefix(n.Name(), pre)
	}
	return ok
}

func truncRef(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
