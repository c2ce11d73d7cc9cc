package auditor

import (
	"bytes"
	"encoding/json"
	"slices"
	"sync"
)

// fastCanonical is canonicalValue's answer for valid JSON (the caller
// checks json.Valid) without decoding into maps and re-encoding by
// reflection: objects get their keys sorted (the last of duplicates
// kept), numbers and literals stay as written, whitespace goes, and a
// string is copied as it is when it holds nothing encoding/json would
// write otherwise (printable ASCII without a backslash, a quote, <, > or
// &); any other string is decoded and encoded by encoding/json, as
// canonicalValue does. ok is false when the input is not what it expects.
func fastCanonical(b []byte) (out []byte, ok bool) {
	p := parsers.Get().(*canonParser)
	p.in, p.i, p.depth = b, 0, 0
	p.space()
	out, ok = p.value(make([]byte, 0, len(b)))
	p.space()
	ok = ok && p.i == len(p.in)
	p.in = nil
	if len(p.levels) <= maxKeptLevels {
		parsers.Put(p)
	}
	return out, ok
}

type canonParser struct {
	in    []byte
	i     int
	depth int
	// levels are the objects' scratch (members and their values), one per
	// nesting depth, kept from record to record with the parser.
	levels []canonLevel
}

type canonLevel struct {
	members []canonMember
	vals    []byte
}

// parsers keeps parsers with their scratch: a record's objects reuse the
// buffers of the previous record's instead of growing new ones.
var parsers = sync.Pool{New: func() any { return new(canonParser) }}

// maxKeptLevels bounds the nesting depth whose scratch a pooled parser keeps.
const maxKeptLevels = 16

func (p *canonParser) space() {
	for p.i < len(p.in) {
		switch p.in[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *canonParser) value(out []byte) ([]byte, bool) {
	if p.i >= len(p.in) {
		return out, false
	}
	switch c := p.in[p.i]; {
	case c == '{':
		return p.object(out)
	case c == '[':
		return p.array(out)
	case c == '"':
		return p.str(out)
	default: // a number or a literal: up to the next delimiter, as written
		start := p.i
		for p.i < len(p.in) {
			switch p.in[p.i] {
			case ',', ']', '}', ' ', '\t', '\n', '\r':
				return append(out, p.in[start:p.i]...), p.i > start
			}
			p.i++
		}
		return append(out, p.in[start:p.i]...), p.i > start
	}
}

// str appends the canonical form of the string at p.i.
func (p *canonParser) str(out []byte) ([]byte, bool) {
	start := p.i
	p.i++ // the opening quote
	plain := true
	for p.i < len(p.in) {
		c := p.in[p.i]
		switch {
		case c == '"':
			p.i++
			tok := p.in[start:p.i]
			if plain {
				return append(out, tok...), true
			}
			var s string
			if json.Unmarshal(tok, &s) != nil {
				return out, false
			}
			q, err := json.Marshal(s)
			if err != nil {
				return out, false
			}
			return append(out, q...), true
		case c == '\\':
			plain = false
			p.i += 2 // the escaped byte cannot end the string
			continue
		case c < 0x20 || c >= 0x7f || c == '<' || c == '>' || c == '&':
			plain = false
		}
		p.i++
	}
	return out, false
}

// skipStr moves past the string at p.i, as str does, writing nothing.
func (p *canonParser) skipStr() bool {
	p.i++ // the opening quote
	for p.i < len(p.in) {
		switch p.in[p.i] {
		case '"':
			p.i++
			return true
		case '\\':
			p.i += 2 // the escaped byte cannot end the string
			continue
		}
		p.i++
	}
	return false
}

// key decodes the object key at p.i: a plain key is the input's own bytes.
func (p *canonParser) key() ([]byte, bool) {
	start := p.i
	if p.i >= len(p.in) || p.in[p.i] != '"' {
		return nil, false
	}
	if !p.skipStr() {
		return nil, false
	}
	tok := p.in[start:p.i]
	plain := true
	for _, c := range tok {
		if c >= 0x80 || c == '\\' {
			plain = false
			break
		}
	}
	if plain {
		return tok[1 : len(tok)-1], true
	}
	var s string
	if json.Unmarshal(tok, &s) != nil {
		return nil, false
	}
	return []byte(s), true
}

type canonMember struct {
	key        []byte
	start, end int // of its value in the object's buffer
}

func (p *canonParser) object(out []byte) ([]byte, bool) {
	p.i++ // {
	p.space()
	if p.i < len(p.in) && p.in[p.i] == '}' {
		p.i++
		return append(out, '{', '}'), true
	}
	if p.depth == len(p.levels) {
		p.levels = append(p.levels, canonLevel{})
	}
	d := p.depth
	members, vals := p.levels[d].members[:0], p.levels[d].vals[:0]
	p.depth++
	defer func() {
		p.depth--
		clear(members) // no key of this record outlives it in the pool
		p.levels[d] = canonLevel{members: members[:0], vals: vals[:0]}
	}()
	for {
		p.space()
		k, ok := p.key()
		if !ok {
			return out, false
		}
		p.space()
		if p.i >= len(p.in) || p.in[p.i] != ':' {
			return out, false
		}
		p.i++
		p.space()
		start := len(vals)
		if vals, ok = p.value(vals); !ok {
			return out, false
		}
		members = append(members, canonMember{k, start, len(vals)})
		p.space()
		if p.i >= len(p.in) {
			return out, false
		}
		if p.in[p.i] == ',' {
			p.i++
			continue
		}
		if p.in[p.i] != '}' {
			return out, false
		}
		p.i++
		break
	}
	// Sorted by key; of duplicates the last one, as decoding into a map.
	slices.SortStableFunc(members, func(a, b canonMember) int { return bytes.Compare(a.key, b.key) })
	out = append(out, '{')
	first, ok := true, true
	for i, m := range members {
		if i+1 < len(members) && bytes.Equal(members[i+1].key, m.key) {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		if out, ok = appendKey(out, m.key); !ok {
			return out, false
		}
		out = append(out, ':')
		out = append(out, vals[m.start:m.end]...)
	}
	return append(out, '}'), true
}

func (p *canonParser) array(out []byte) ([]byte, bool) {
	p.i++ // [
	p.space()
	out = append(out, '[')
	if p.i < len(p.in) && p.in[p.i] == ']' {
		p.i++
		return append(out, ']'), true
	}
	for {
		p.space()
		var ok bool
		if out, ok = p.value(out); !ok {
			return out, false
		}
		p.space()
		if p.i >= len(p.in) {
			return out, false
		}
		if p.in[p.i] == ',' {
			p.i++
			out = append(out, ',')
			continue
		}
		if p.in[p.i] != ']' {
			return out, false
		}
		p.i++
		return append(out, ']'), true
	}
}

// appendKey appends a key as encoding/json writes it.
func appendKey(out []byte, k []byte) ([]byte, bool) {
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, err := json.Marshal(string(k))
			if err != nil {
				return out, false
			}
			return append(out, q...), true
		}
	}
	out = append(out, '"')
	out = append(out, k...)
	return append(out, '"'), true
}
