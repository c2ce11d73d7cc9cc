package envelope

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Flags of an envelope.
const (
	FlagCompressed byte = 0x01
	FlagEndStream  byte = 0x02
)

// MaxSize bounds the payload length a Reader accepts (envd uses connect-go's
// default of no limit; 64 MiB is far above any envd message).
const MaxSize = 64 << 20

// ErrTooLarge is returned for an envelope whose declared length exceeds MaxSize.
var ErrTooLarge = errors.New("envelope: payload too large")

// Envelope is one decoded frame.
type Envelope struct {
	Flags   byte
	Payload []byte // as on the wire (still compressed when Flags&FlagCompressed != 0)
}

// EndStream reports whether this is the end-of-stream envelope.
func (e Envelope) EndStream() bool { return e.Flags&FlagEndStream != 0 }

// Compressed reports whether the payload is compressed.
func (e Envelope) Compressed() bool { return e.Flags&FlagCompressed != 0 }

// Gunzip returns the payload, decompressed with gzip when it is compressed.
func (e Envelope) Gunzip() ([]byte, error) {
	if !e.Compressed() {
		return e.Payload, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(e.Payload))
	if err != nil {
		return nil, fmt.Errorf("envelope: gzip: %w", err)
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("envelope: gunzip: %w", err)
	}
	if len(out) > MaxSize {
		return nil, ErrTooLarge
	}
	return out, nil
}

// Append appends the encoding of one envelope to dst.
func Append(dst []byte, flags byte, payload []byte) []byte {
	var hdr [5]byte
	hdr[0] = flags
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	dst = append(dst, hdr[:]...)
	return append(dst, payload...)
}

// Reader decodes envelopes from a byte stream.
type Reader struct {
	r io.Reader
}

// NewReader returns a Reader reading from r.
func NewReader(r io.Reader) *Reader { return &Reader{r: r} }

// Next returns the next envelope. It returns io.EOF at a clean end of input
// (between envelopes) and io.ErrUnexpectedEOF for a truncated envelope.
func (r *Reader) Next() (Envelope, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r.r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return Envelope{}, io.EOF
		}
		return Envelope{}, fmt.Errorf("envelope: read header: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxSize {
		return Envelope{}, ErrTooLarge
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(r.r, payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Envelope{}, fmt.Errorf("envelope: read payload: %w", err)
	}
	return Envelope{Flags: hdr[0], Payload: payload}, nil
}

// ReadAll decodes every envelope in b.
func ReadAll(b []byte) ([]Envelope, error) {
	r := NewReader(bytes.NewReader(b))
	var out []Envelope
	for {
		e, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, e)
	}
}
