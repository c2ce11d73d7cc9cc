package auditor

import "strconv"

// appendLine appends e's line as json.Encoder writes it (the keys in the
// struct's order, a newline at the end) when every string of it is plain
// printable ASCII and its record holds nothing encoding/json would escape
// again (<, >, &, U+2028, U+2029: a canonical record is compact already);
// otherwise it returns ok false and b unchanged, and the caller encodes the
// entry with encoding/json. The encoder was 3 % of dev's CPU under bench
// exec, most of it compacting the record a second time.
// TestLineIsEncoderOutput and FuzzLine hold it to json.Encoder.
func appendLine(b []byte, e *Entry) ([]byte, bool) {
	if len(e.Record) == 0 || !plainJSON(e.ID) || !plainJSON(e.Type) || !plainJSON(e.Source) || !plainJSON(e.Subject) ||
		!plainJSON(e.Sig) || !plainJSON(e.Signer) || !plainJSON(e.PrevHash) || !plainJSON(e.Hash) ||
		!plainJSON(e.Signature) || !plainJSON(e.SigBatch) || !plainJSON(e.NotAfter) || !plainJSON(e.Data) {
		return b, false
	}
	for _, c := range e.Record {
		if c == '<' || c == '>' || c == '&' || c == 0xe2 { // 0xe2: the first byte of U+2028 and U+2029
			return b, false
		}
	}
	n := len(b)
	str := func(key, v string) {
		b = append(b, key...)
		b = append(b, '"')
		b = append(b, v...)
		b = append(b, '"')
	}
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	str(`,"id":`, e.ID)
	str(`,"type":`, e.Type)
	str(`,"source":`, e.Source)
	b = append(b, `,"time":"`...)
	tb, err := e.Time.AppendText(b)
	if err != nil {
		return b[:n], false // encoding/json reports it
	}
	b = tb
	b = append(b, '"')
	str(`,"subject":`, e.Subject)
	if e.StreamSeq != 0 {
		b = append(b, `,"stream_seq":`...)
		b = strconv.AppendUint(b, e.StreamSeq, 10)
	}
	b = append(b, `,"record":`...)
	b = append(b, e.Record...)
	if e.Sig != "" {
		str(`,"sig":`, e.Sig)
	}
	if e.Signer != "" {
		str(`,"signer":`, e.Signer)
	}
	if e.Signature != "" {
		str(`,"signature":`, e.Signature)
	}
	if e.SigBatch != "" {
		str(`,"sig_batch":`, e.SigBatch)
	}
	if e.NotAfter != "" {
		str(`,"not_after":`, e.NotAfter)
	}
	if e.Data != "" {
		str(`,"data":`, e.Data)
	}
	str(`,"prev_hash":`, e.PrevHash)
	str(`,"hash":`, e.Hash)
	return append(b, '}', '\n'), true
}

// plainJSON reports whether encoding/json writes s as it is between quotes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
