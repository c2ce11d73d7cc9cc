package schemas

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	validator "github.com/santhosh-tekuri/jsonschema/v6"
)

// Validator checks JSON documents against the schema files.
type Validator struct {
	schemas map[string]*validator.Schema
}

// NewValidator compiles schema files given by name, as Generate returns them.
func NewValidator(files map[string][]byte) (*Validator, error) {
	c := validator.NewCompiler()
	c.DefaultDraft(validator.Draft2020)
	c.AssertFormat()
	for name, b := range files {
		doc, err := validator.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("schemas: %s: %w", name, err)
		}
		if err := c.AddResource(resourceURL(name), doc); err != nil {
			return nil, fmt.Errorf("schemas: %s: %w", name, err)
		}
	}
	v := &Validator{schemas: map[string]*validator.Schema{}}
	for name := range files {
		s, err := c.Compile(resourceURL(name))
		if err != nil {
			return nil, fmt.Errorf("schemas: compile %s: %w", name, err)
		}
		v.schemas[name] = s
	}
	return v, nil
}

// LoadValidator compiles every *.json schema in dir (docs/protocol).
func LoadValidator(dir string) (*Validator, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		files[filepath.Base(p)] = b
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("schemas: no schema files in %s", dir)
	}
	return NewValidator(files)
}

// Validate checks doc against the schema file name (e.g. "create.reply.json").
func (v *Validator) Validate(name string, doc []byte) error {
	s, ok := v.schemas[name]
	if !ok {
		return fmt.Errorf("schemas: no schema %s", name)
	}
	inst, err := validator.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("schemas: %s: document is not JSON: %w", name, err)
	}
	if err := s.Validate(inst); err != nil {
		return fmt.Errorf("schemas: document does not conform to %s: %w", name, err)
	}
	return nil
}

func resourceURL(name string) string { return "https://schemas.sandboxio.invalid/protocol/v1/" + name }
