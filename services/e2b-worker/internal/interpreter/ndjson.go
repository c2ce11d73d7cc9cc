package interpreter

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// MaxLine bounds one NDJSON line (results can carry large base64 images).
const MaxLine = 64 << 20

// ErrLineTooLong is returned for a line longer than MaxLine.
var ErrLineTooLong = errors.New("interpreter: ndjson line too long")

// Message is one line of the /execute stream. Type is one of stdout,
// stderr, result, error, number_of_executions, keepalive, end_of_execution;
// unknown types are passed through.
type Message struct {
	Type string `json:"type"`

	// stdout / stderr
	Text      string `json:"text,omitempty"`
	Timestamp string `json:"timestamp,omitempty"`

	// result (Text above doubles as the text/plain representation)
	HTML         string         `json:"html,omitempty"`
	Markdown     string         `json:"markdown,omitempty"`
	SVG          string         `json:"svg,omitempty"`
	PNG          string         `json:"png,omitempty"`
	JPEG         string         `json:"jpeg,omitempty"`
	PDF          string         `json:"pdf,omitempty"`
	LaTeX        string         `json:"latex,omitempty"`
	JSON         map[string]any `json:"json,omitempty"`
	JavaScript   string         `json:"javascript,omitempty"`
	Data         map[string]any `json:"data,omitempty"`
	Chart        map[string]any `json:"chart,omitempty"`
	Extra        map[string]any `json:"extra,omitempty"`
	IsMainResult bool           `json:"is_main_result,omitempty"`

	// error
	Name      string `json:"name,omitempty"`
	Value     string `json:"value,omitempty"`
	Traceback string `json:"traceback,omitempty"`

	// number_of_executions
	ExecutionCount int `json:"execution_count,omitempty"`
}

// Decoder reads NDJSON messages. Blank lines are skipped.
type Decoder struct {
	r *bufio.Reader
}

// NewDecoder returns a Decoder reading from r.
func NewDecoder(r io.Reader) *Decoder { return &Decoder{r: bufio.NewReaderSize(r, 64<<10)} }

// Next returns the next message, io.EOF at a clean end of input, or
// io.ErrUnexpectedEOF for a final line without its newline.
func (d *Decoder) Next() (Message, error) {
	for {
		line, err := d.readLine()
		if err != nil {
			return Message{}, err
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var m Message
		if err := json.Unmarshal(line, &m); err != nil {
			return Message{}, fmt.Errorf("interpreter: bad ndjson line: %w", err)
		}
		if m.Type == "" {
			return Message{}, errors.New("interpreter: ndjson message without type")
		}
		return m, nil
	}
}

func (d *Decoder) readLine() ([]byte, error) {
	var buf []byte
	for {
		chunk, err := d.r.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > MaxLine {
			return nil, ErrLineTooLong
		}
		switch {
		case err == nil:
			return buf, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(bytes.TrimSpace(buf)) == 0 {
				return nil, io.EOF
			}
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}
