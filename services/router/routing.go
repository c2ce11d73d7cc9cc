package router

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Routing is the routing file: classes of sandbox mapped to backends.
type Routing struct {
	DefaultClass string           `yaml:"default_class"`
	Classes      map[string]Class `yaml:"classes"`
}

// Class is one class of the routing file.
type Class struct {
	Backend          string            `yaml:"backend"`
	Image            string            `yaml:"image,omitempty"`
	Template         string            `yaml:"template,omitempty"`
	Runtime          string            `yaml:"runtime,omitempty"`
	RequireIsolation string            `yaml:"require_isolation,omitempty"`
	Resources        *events.Resources `yaml:"resources,omitempty"`
	ReadOnlyRoot     bool              `yaml:"read_only_root,omitempty"`
	Options          map[string]string `yaml:"options,omitempty"`
}

// DefaultRoutingYAML is used when no routing file is given.
const DefaultRoutingYAML = `# sandboxio routing: classes of sandbox mapped to backends.
default_class: standard
classes:
  standard:  {backend: docker, image: "sandboxio/python:3.11", require_isolation: container}
  hardened:  {backend: docker, image: "sandboxio/python:3.11", runtime: runsc, require_isolation: gvisor}
  untrusted: {backend: e2b, template: base, require_isolation: microvm}
  base:      {backend: docker, image: "sandboxio/base:latest", require_isolation: container}
  fake:      {backend: fake}
`

// ParseRouting parses and validates a routing file. Unknown keys are errors:
// a typo must not silently weaken a class.
func ParseRouting(data []byte) (*Routing, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var r Routing
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("routing: %w", err)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// LoadRouting reads a routing file; the empty path gives the default routing.
func LoadRouting(path string) (*Routing, error) {
	if path == "" {
		return ParseRouting([]byte(DefaultRoutingYAML))
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("routing: %w", err)
	}
	return ParseRouting(data)
}

// Validate checks the mandatory default_class and every class.
func (r *Routing) Validate() error {
	var errs []error
	if r.DefaultClass == "" {
		errs = append(errs, errors.New("routing: default_class is mandatory"))
	} else if _, ok := r.Classes[r.DefaultClass]; !ok {
		errs = append(errs, fmt.Errorf("routing: default_class %q is not among the classes", r.DefaultClass))
	}
	names := make([]string, 0, len(r.Classes))
	for n := range r.Classes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := r.Classes[n]
		if !events.ValidID(n) {
			errs = append(errs, fmt.Errorf("routing: class name %q: use [a-z0-9_-]", n))
		}
		if !events.ValidID(c.Backend) {
			errs = append(errs, fmt.Errorf("routing: class %q: backend %q is missing or not a valid name", n, c.Backend))
		}
		if _, err := events.ParseIsolationTier(c.RequireIsolation); err != nil {
			errs = append(errs, fmt.Errorf("routing: class %q: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// Spec turns a class into the spec a worker receives.
func (c Class) Spec(name string) events.ClassSpec {
	return events.ClassSpec{Name: name, Backend: c.Backend, Image: c.Image, Runtime: c.Runtime, Template: c.Template,
		RequireIsolation: events.IsolationTier(c.RequireIsolation), Resources: c.Resources,
		ReadOnlyRoot: c.ReadOnlyRoot, Options: c.Options}
}

// resolve picks the class spec of a create request: its dsn, its class, or
// the default class.
func (r *Routing) resolve(req *events.CreateRequest) (events.ClassSpec, *events.Error) {
	if req.DSN != "" {
		return parseDSN(req.DSN)
	}
	name := req.Class
	if name == "" {
		name = r.DefaultClass
	}
	c, ok := r.Classes[name]
	if !ok {
		return events.ClassSpec{}, events.Errorf(events.CodeUnknownClass, "class %q is not in the routing file (known: %s)", name, strings.Join(r.classNames(), ", ")).With("field", "class")
	}
	return c.Spec(name), nil
}

func (r *Routing) classNames() []string {
	names := make([]string, 0, len(r.Classes))
	for n := range r.Classes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// parseDSN reads backend://target: docker://IMAGE, e2b://TEMPLATE, modal://IMAGE, fake://[IMAGE].
func parseDSN(dsn string) (events.ClassSpec, *events.Error) {
	scheme, target, ok := strings.Cut(dsn, "://")
	if !ok || scheme == "" {
		return events.ClassSpec{}, events.Errorf(events.CodeInvalidDSN, "dsn %q: want backend://target, e.g. docker://sandboxio/python:3.11", dsn).With("field", "dsn")
	}
	if !events.ValidID(scheme) {
		return events.ClassSpec{}, events.Errorf(events.CodeInvalidDSN, "dsn %q: backend %q is not a valid name", dsn, scheme).With("field", "dsn")
	}
	if strings.ContainsAny(target, " \t\n\x00") || len(target) > 512 {
		return events.ClassSpec{}, events.Errorf(events.CodeInvalidDSN, "dsn %q: target has spaces or is too long", dsn).With("field", "dsn")
	}
	spec := events.ClassSpec{Name: "dsn", Backend: scheme}
	switch scheme {
	case "e2b":
		spec.Template = target
		if spec.Template == "" {
			spec.Template = "base"
		}
	default:
		spec.Image = target
		if scheme == "docker" && target == "" {
			return events.ClassSpec{}, events.Errorf(events.CodeInvalidDSN, "dsn %q: docker:// needs an image", dsn).With("field", "dsn")
		}
	}
	return spec, nil
}
