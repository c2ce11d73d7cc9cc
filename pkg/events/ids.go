package events

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

// MaxIDLength bounds every id that becomes a subject token or a KV key.
const MaxIDLength = 64

// ValidID reports whether s may be used as a sandbox, process, worker or
// backend id: 1 to MaxIDLength characters from [a-z0-9_-]. Everything else,
// in particular '.', '*', '>', whitespace and upper case, is refused, so an
// id taken from a request can be put into a subject or a KV key as it is.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > MaxIDLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// crockford is the lowercase Crockford base32 alphabet used by ULIDs.
const crockford = "0123456789abcdefghjkmnpqrstvwxyz"

// NewID returns a new 26-character lowercase ULID: 48 bits of milliseconds
// then 80 random bits. Ids sort by creation time and are always ValidID.
func NewID() string {
	return newIDAt(time.Now())
}

func newIDAt(t time.Time) string {
	var b [16]byte
	ms := uint64(t.UnixMilli())
	binary.BigEndian.PutUint16(b[0:2], uint16(ms>>32))
	binary.BigEndian.PutUint32(b[2:6], uint32(ms))
	if _, err := rand.Read(b[6:]); err != nil {
		panic("events: crypto/rand failed: " + err.Error())
	}
	return encodeULID(b)
}

func encodeULID(b [16]byte) string {
	// 128 bits as 26 base32 digits; the first digit carries 3 bits.
	var out [26]byte
	hi := binary.BigEndian.Uint64(b[0:8])
	lo := binary.BigEndian.Uint64(b[8:16])
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&0x1f]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}
