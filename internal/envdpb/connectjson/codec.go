package connectjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Codec names registered by connect.WithProtoJSON; WithCodecs replaces both.
const (
	nameJSON        = "json"
	nameJSONCharset = "json; charset=utf-8"
)

// Codec is a stable proto3 JSON codec. Its zero value is not usable; use the
// options from ClientOptions or HandlerOptions.
type Codec struct{ name string }

var _ connect.Codec = Codec{}

// ClientOptions returns the options that make a connect-go client speak proto3
// JSON with this codec and without compression, as E2B's SDKs do.
func ClientOptions() []connect.ClientOption {
	return []connect.ClientOption{
		connect.WithCodec(Codec{name: nameJSON}),
		// The SDKs disable compression in both directions.
		connect.WithAcceptCompression("gzip", nil, nil),
	}
}

// HandlerOptions returns the handler options that replace connect-go's JSON
// codecs with this one.
func HandlerOptions() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(Codec{name: nameJSON}),
		connect.WithCodec(Codec{name: nameJSONCharset}),
	}
}

// NewCodec returns the codec under name: "json" or "json; charset=utf-8",
// the names connect-go registers JSON under.
func NewCodec(name string) Codec { return Codec{name: name} }

// Names are the two names a JSON codec must be registered under.
var Names = []string{nameJSON, nameJSONCharset}

// Name implements connect.Codec.
func (c Codec) Name() string { return c.name }

// Marshal implements connect.Codec; the output is compact JSON.
func (c Codec) Marshal(message any) ([]byte, error) {
	m, ok := message.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T doesn't implement proto.Message", message)
	}
	raw, err := protojson.MarshalOptions{}.Marshal(m)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fmt.Errorf("compact json: %w", err)
	}
	return buf.Bytes(), nil
}

// Unmarshal implements connect.Codec. Unknown fields are ignored.
func (c Codec) Unmarshal(data []byte, message any) error {
	m, ok := message.(proto.Message)
	if !ok {
		return fmt.Errorf("%T doesn't implement proto.Message", message)
	}
	if len(data) == 0 {
		return errors.New("zero-length payload is not a valid JSON object")
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, m); err != nil {
		return &unmarshalError{msg: fmt.Sprintf("unmarshal into %T: %s", message, Normalize(err.Error())), err: err}
	}
	return nil
}

// Normalize replaces protobuf's randomised non-breaking space in "proto: "
// error prefixes with a plain space.
func Normalize(s string) string { return strings.ReplaceAll(s, "proto:\u00a0", "proto: ") }

type unmarshalError struct {
	msg string
	err error
}

func (e *unmarshalError) Error() string { return e.msg }
func (e *unmarshalError) Unwrap() error { return e.err }
