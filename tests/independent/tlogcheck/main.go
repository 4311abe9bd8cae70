// Command tlogcheck is an independent checker of signed checkpoints and Merkle proofs.
//
// It is written from the specifications, not from the Python it checks: RFC 9162
// §2.1.1 (hashes), §2.1.3.2 (verifying an inclusion proof) and §2.1.4.2 (verifying a
// consistency proof); C2SP signed-note and tlog-checkpoint; and the Ed25519 key
// encoding of golang.org/x/mod/sumdb/note. Only Go's standard library is used.
//
// Usage:
//
//	tlogcheck checkpoint --vkey KEY NOTE_FILE
//	tlogcheck inclusion --vkey KEY PROOF_FILE [--checkpoint NOTE_FILE]
//	tlogcheck consistency --vkey KEY --old NOTE_FILE --new NOTE_FILE PROOF_FILE
//	tlogcheck sign --key SIGNER_KEY_FILE TEXT_FILE
//	tlogcheck vkey --key SIGNER_KEY_FILE
//
// KEY is a verifier key's text or a file holding it. "-" reads a file from stdin.
// Exit 0 when the check passes (a JSON summary on stdout), 1 when it fails (the
// reason on stderr), 2 on a usage error.
package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

const algEd25519 = 1

type failure struct{ msg string }

func (f failure) Error() string { return f.msg }

func fail(format string, args ...any) error { return failure{fmt.Sprintf(format, args...)} }

// ---- keys (golang.org/x/mod/sumdb/note encoding) ----

type verifier struct {
	name string
	id   uint32
	pub  ed25519.PublicKey
}

type signer struct {
	name string
	id   uint32
	priv ed25519.PrivateKey
}

func keyID(name string, pub []byte) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{'\n', algEd25519})
	h.Write(pub)
	sum := h.Sum(nil)
	return uint32(sum[0])<<24 | uint32(sum[1])<<16 | uint32(sum[2])<<8 | uint32(sum[3])
}

func validName(name string) bool {
	if name == "" || !utf8.ValidString(name) {
		return false
	}
	for _, r := range name {
		if r == '+' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return false
		}
	}
	return true
}

func splitKey(text string) (name string, id uint32, key []byte, err error) {
	// the key's base64 may itself hold "+": split at the first two only
	parts := strings.SplitN(text, "+", 3)
	if len(parts) != 3 {
		return "", 0, nil, fail("a key is name+id+key")
	}
	name = parts[0]
	if !validName(name) {
		return "", 0, nil, fail("invalid key name %q", name)
	}
	if len(parts[1]) != 8 {
		return "", 0, nil, fail("a key id is 8 hex digits")
	}
	raw, err := hex.DecodeString(parts[1])
	if err != nil {
		return "", 0, nil, fail("a key id is 8 hex digits")
	}
	id = uint32(raw[0])<<24 | uint32(raw[1])<<16 | uint32(raw[2])<<8 | uint32(raw[3])
	key, err = base64.StdEncoding.Strict().DecodeString(parts[2])
	if err != nil || len(key) != 1+32 || key[0] != algEd25519 {
		return "", 0, nil, fail("a key is base64 of 0x01 and 32 bytes")
	}
	return name, id, key[1:], nil
}

func parseVerifier(text string) (verifier, error) {
	name, id, pub, err := splitKey(strings.TrimSpace(text))
	if err != nil {
		return verifier{}, err
	}
	if keyID(name, pub) != id {
		return verifier{}, fail("the key id does not match the key")
	}
	return verifier{name, id, ed25519.PublicKey(pub)}, nil
}

func parseSigner(text string) (signer, error) {
	text = strings.TrimSpace(text)
	if !strings.HasPrefix(text, "PRIVATE+KEY+") {
		return signer{}, fail("a signer key begins with PRIVATE+KEY+")
	}
	name, id, seed, err := splitKey(strings.TrimPrefix(text, "PRIVATE+KEY+"))
	if err != nil {
		return signer{}, err
	}
	priv := ed25519.NewKeyFromSeed(seed)
	if keyID(name, priv.Public().(ed25519.PublicKey)) != id {
		return signer{}, fail("the key id does not match the key")
	}
	return signer{name, id, priv}, nil
}

func (s signer) verifierText() string {
	pub := append([]byte{algEd25519}, s.priv.Public().(ed25519.PublicKey)...)
	return fmt.Sprintf("%s+%08x+%s", s.name, s.id, base64.StdEncoding.EncodeToString(pub))
}

// ---- signed notes (C2SP signed-note) ----

const sigPrefix = "\u2014 " // an em dash and a space

func validNoteText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r != '\n' && (r < 0x20 || unicode.IsControl(r)) {
			return false
		}
	}
	return true
}

// openNote returns the text of a note once a signature by v verifies, and refuses a
// note whose signature by v fails. Signatures by other keys are ignored.
func openNote(msg []byte, v verifier) (string, error) {
	s := string(msg)
	if !validNoteText(s) {
		return "", fail("malformed note: not UTF-8 text")
	}
	split := strings.LastIndex(s, "\n\n")
	if split < 0 || !strings.HasSuffix(s, "\n") {
		return "", fail("malformed note: no blank line before the signatures")
	}
	text, block := s[:split+1], s[split+2:]
	lines := strings.Split(strings.TrimSuffix(block, "\n"), "\n")
	if len(lines) == 0 || len(lines) > 100 {
		return "", fail("malformed note: 1 to 100 signature lines")
	}
	verified := 0
	for _, line := range lines {
		if !strings.HasPrefix(line, sigPrefix) {
			return "", fail("malformed note: a signature line begins with an em dash")
		}
		name, b64, ok := strings.Cut(strings.TrimPrefix(line, sigPrefix), " ")
		if !ok || !validName(name) {
			return "", fail("malformed note: a signature line is a name and base64")
		}
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(sig) < 5 {
			return "", fail("malformed note: a signature is base64 of a key id and bytes")
		}
		id := uint32(sig[0])<<24 | uint32(sig[1])<<16 | uint32(sig[2])<<8 | uint32(sig[3])
		if name != v.name || id != v.id {
			continue
		}
		if !ed25519.Verify(v.pub, []byte(text), sig[4:]) {
			return "", fail("signature invalid: a signature by %s+%08x does not verify", v.name, v.id)
		}
		verified++
	}
	if verified == 0 {
		return "", fail("signature invalid: no signature by %s+%08x", v.name, v.id)
	}
	return text, nil
}

func signNote(text string, s signer) (string, error) {
	if !strings.HasSuffix(text, "\n") || !validNoteText(text) {
		return "", fail("a note's text is UTF-8 ending in a newline")
	}
	sig := []byte{byte(s.id >> 24), byte(s.id >> 16), byte(s.id >> 8), byte(s.id)}
	sig = append(sig, ed25519.Sign(s.priv, []byte(text))...)
	return text + "\n" + sigPrefix + s.name + " " + base64.StdEncoding.EncodeToString(sig) + "\n", nil
}

// ---- checkpoints (C2SP tlog-checkpoint) ----

type checkpoint struct {
	Origin  string `json:"origin"`
	Size    uint64 `json:"size"`
	Root    []byte `json:"-"`
	RootHex string `json:"rootHash"`
}

func parseCheckpoint(text string) (checkpoint, error) {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) < 3 || lines[0] == "" {
		return checkpoint{}, fail("malformed checkpoint: origin, size and root lines")
	}
	size := lines[1]
	if size == "" || (len(size) > 1 && size[0] == '0') || strings.Trim(size, "0123456789") != "" {
		return checkpoint{}, fail("malformed checkpoint: a size in decimal")
	}
	n, err := strconv.ParseUint(size, 10, 63)
	if err != nil {
		return checkpoint{}, fail("malformed checkpoint: a size below 2^63")
	}
	root, err := base64.StdEncoding.Strict().DecodeString(lines[2])
	if err != nil || len(root) != sha256.Size {
		return checkpoint{}, fail("malformed checkpoint: a root of 32 bytes in base64")
	}
	return checkpoint{lines[0], n, root, hex.EncodeToString(root)}, nil
}

func openCheckpoint(msg []byte, v verifier) (checkpoint, error) {
	text, err := openNote(msg, v)
	if err != nil {
		return checkpoint{}, err
	}
	return parseCheckpoint(text)
}

// ---- RFC 9162 hashing and proof checks ----

func hashLeaf(data []byte) []byte {
	sum := sha256.Sum256(append([]byte{0x00}, data...))
	return sum[:]
}

func hashChildren(left, right []byte) []byte {
	h := sha256.New()
	h.Write([]byte{0x01})
	h.Write(left)
	h.Write(right)
	return h.Sum(nil)
}

// verifyInclusion is RFC 9162 §2.1.3.2, step by step.
func verifyInclusion(index, size uint64, leaf []byte, path [][]byte, root []byte) error {
	if index >= size {
		return fail("mismatch: leaf index %d is outside a tree of %d", index, size)
	}
	fn, sn := index, size-1
	r := leaf
	for _, p := range path {
		if sn == 0 {
			return fail("mismatch: the inclusion proof is too long")
		}
		if fn&1 == 1 || fn == sn {
			r = hashChildren(p, r)
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			r = hashChildren(r, p)
		}
		fn >>= 1
		sn >>= 1
	}
	if sn != 0 {
		return fail("mismatch: the inclusion proof is too short")
	}
	if !bytes.Equal(r, root) {
		return fail("mismatch: the inclusion proof leads to %x, not %x", r, root)
	}
	return nil
}

// verifyConsistency is RFC 9162 §2.1.4.2, step by step; sizes 0 and equal sizes take
// the empty proof.
func verifyConsistency(first, second uint64, firstHash, secondHash []byte, path [][]byte) error {
	if first > second {
		return fail("mismatch: the old tree is larger than the new")
	}
	if first == second || first == 0 {
		if len(path) != 0 {
			return fail("mismatch: a proof from an empty or equal tree is empty")
		}
		if first == second && !bytes.Equal(firstHash, secondHash) {
			return fail("mismatch: equal sizes with different roots")
		}
		empty := sha256.Sum256(nil)
		if first == 0 && !bytes.Equal(firstHash, empty[:]) {
			return fail("mismatch: the empty tree's root is SHA-256 of nothing")
		}
		return nil
	}
	if len(path) == 0 {
		return fail("mismatch: the consistency proof is empty")
	}
	if first&(first-1) == 0 { // an exact power of two
		path = append([][]byte{firstHash}, path...)
	}
	fn, sn := first-1, second-1
	for fn&1 == 1 {
		fn >>= 1
		sn >>= 1
	}
	fr, sr := path[0], path[0]
	for _, c := range path[1:] {
		if sn == 0 {
			return fail("mismatch: the consistency proof is too long")
		}
		if fn&1 == 1 || fn == sn {
			fr = hashChildren(c, fr)
			sr = hashChildren(c, sr)
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			sr = hashChildren(sr, c)
		}
		fn >>= 1
		sn >>= 1
	}
	if sn != 0 {
		return fail("mismatch: the consistency proof is too short")
	}
	if !bytes.Equal(fr, firstHash) {
		return fail("mismatch: the proof leads to old root %x, not %x", fr, firstHash)
	}
	if !bytes.Equal(sr, secondHash) {
		return fail("mismatch: the proof leads to new root %x, not %x", sr, secondHash)
	}
	return nil
}

// ---- the leaf of a feed item ----

// jsString writes s as ECMAScript's JSON.stringify does: `"`, `\`, \b \f \n \r \t
// escaped, other code points below U+0020 as lowercase \u00xx, the rest as they are.
func jsString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

type feedLeaf struct {
	RunID     string `json:"runId"`
	Sequence  uint64 `json:"sequence"`
	EventHash string `json:"eventHash"`
}

// leafData is the canonical JSON of the three fields, keys in code-point order.
func (l feedLeaf) leafData() []byte {
	return []byte(`{"eventHash":` + jsString(l.EventHash) + `,"runId":` + jsString(l.RunID) +
		`,"sequence":` + strconv.FormatUint(l.Sequence, 10) + `}`)
}

// ---- commands ----

func readInput(path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(path)
}

func keyText(arg string) (string, error) {
	if info, err := os.Stat(arg); err == nil && info.Mode().IsRegular() {
		data, err := os.ReadFile(arg)
		return string(data), err
	}
	return arg, nil
}

func decodeHashes(items []string) ([][]byte, error) {
	out := make([][]byte, len(items))
	for i, item := range items {
		h, err := base64.StdEncoding.Strict().DecodeString(item)
		if err != nil || len(h) != sha256.Size {
			return nil, fail("malformed proof: hash %d is not 32 bytes in base64", i)
		}
		out[i] = h
	}
	return out, nil
}

type inclusionDoc struct {
	Origin     string    `json:"origin"`
	TreeSize   *uint64   `json:"treeSize"`
	LeafIndex  *uint64   `json:"leafIndex"`
	Leaf       *feedLeaf `json:"leaf"`
	Hashes     []string  `json:"hashes"`
	Checkpoint string    `json:"checkpoint"`
}

func cmdInclusion(v verifier, proofPath, notePath string) (any, error) {
	raw, err := readInput(proofPath)
	if err != nil {
		return nil, err
	}
	var doc inclusionDoc
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fail("malformed proof: %v", err)
	}
	if doc.TreeSize == nil || doc.LeafIndex == nil || doc.Leaf == nil || doc.Hashes == nil {
		return nil, fail("malformed proof: treeSize, leafIndex, leaf and hashes are required")
	}
	note := []byte(doc.Checkpoint)
	if notePath != "" {
		if note, err = readInput(notePath); err != nil {
			return nil, err
		}
	}
	cp, err := openCheckpoint(note, v)
	if err != nil {
		return nil, err
	}
	if *doc.TreeSize != cp.Size {
		return nil, fail("mismatch: the proof is for a tree of %d, the checkpoint of %d", *doc.TreeSize, cp.Size)
	}
	if doc.Origin != "" && doc.Origin != cp.Origin {
		return nil, fail("mismatch: the proof names origin %q, the checkpoint %q", doc.Origin, cp.Origin)
	}
	path, err := decodeHashes(doc.Hashes)
	if err != nil {
		return nil, err
	}
	leaf := hashLeaf(doc.Leaf.leafData())
	if err := verifyInclusion(*doc.LeafIndex, cp.Size, leaf, path, cp.Root); err != nil {
		return nil, err
	}
	return map[string]any{"ok": true, "checkpoint": cp, "leafIndex": *doc.LeafIndex,
		"leafHash": hex.EncodeToString(leaf)}, nil
}

// A consistency proof is a JSON list of base64 hashes, or an object whose "hashes"
// member is one; its "oldSize" and "newSize", when given, must be the checkpoints'.
func readConsistency(path string, oldSize, newSize uint64) ([][]byte, error) {
	raw, err := readInput(path)
	if err != nil {
		return nil, err
	}
	var list []string
	if json.Unmarshal(raw, &list) != nil {
		var doc struct {
			OldSize *uint64  `json:"oldSize"`
			NewSize *uint64  `json:"newSize"`
			Hashes  []string `json:"hashes"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil || doc.Hashes == nil {
			return nil, fail("malformed proof: a list of hashes, or an object with \"hashes\"")
		}
		if (doc.OldSize != nil && *doc.OldSize != oldSize) || (doc.NewSize != nil && *doc.NewSize != newSize) {
			return nil, fail("mismatch: the proof is between other sizes than the checkpoints'")
		}
		list = doc.Hashes
	}
	return decodeHashes(list)
}

func cmdConsistency(v verifier, proofPath, oldPath, newPath string) (any, error) {
	oldNote, err := readInput(oldPath)
	if err != nil {
		return nil, err
	}
	newNote, err := readInput(newPath)
	if err != nil {
		return nil, err
	}
	older, err := openCheckpoint(oldNote, v)
	if err != nil {
		return nil, err
	}
	newer, err := openCheckpoint(newNote, v)
	if err != nil {
		return nil, err
	}
	if older.Origin != newer.Origin {
		return nil, fail("mismatch: checkpoints of two logs (%q, %q)", older.Origin, newer.Origin)
	}
	path, err := readConsistency(proofPath, older.Size, newer.Size)
	if err != nil {
		return nil, err
	}
	if err := verifyConsistency(older.Size, newer.Size, older.Root, newer.Root, path); err != nil {
		return nil, err
	}
	return map[string]any{"ok": true, "old": older, "new": newer}, nil
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usage("a command: checkpoint, inclusion, consistency, sign, vkey")
	}
	flags := flag.NewFlagSet(args[0], flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	vkey := flags.String("vkey", "", "verifier key (text or file)")
	skey := flags.String("key", "", "signer key file")
	notePath := flags.String("checkpoint", "", "checkpoint note file")
	oldPath := flags.String("old", "", "older checkpoint note file")
	newPath := flags.String("new", "", "newer checkpoint note file")
	// flags may follow the positional argument
	var positional []string
	rest := args[1:]
	for {
		if err := flags.Parse(rest); err != nil {
			return usage(err.Error())
		}
		rest = flags.Args()
		if len(rest) == 0 {
			break
		}
		positional = append(positional, rest[0])
		rest = rest[1:]
	}
	var result any
	var err error
	switch args[0] {
	case "checkpoint", "inclusion", "consistency":
		if *vkey == "" || len(positional) != 1 {
			return usage(args[0] + " takes --vkey KEY and one file")
		}
		var text string
		if text, err = keyText(*vkey); err != nil {
			return err
		}
		var v verifier
		if v, err = parseVerifier(text); err != nil {
			return err
		}
		switch args[0] {
		case "checkpoint":
			var note []byte
			if note, err = readInput(positional[0]); err == nil {
				result, err = openCheckpoint(note, v)
			}
		case "inclusion":
			result, err = cmdInclusion(v, positional[0], *notePath)
		default:
			if *oldPath == "" || *newPath == "" {
				return usage("consistency takes --old and --new checkpoint files")
			}
			result, err = cmdConsistency(v, positional[0], *oldPath, *newPath)
		}
	case "sign", "vkey":
		if *skey == "" || len(positional) != map[string]int{"sign": 1, "vkey": 0}[args[0]] {
			return usage(args[0] + " takes --key FILE")
		}
		var data []byte
		if data, err = os.ReadFile(*skey); err != nil {
			return err
		}
		var s signer
		if s, err = parseSigner(string(data)); err != nil {
			return err
		}
		if args[0] == "vkey" {
			_, err = fmt.Fprintln(stdout, s.verifierText())
			return err
		}
		var text []byte
		if text, err = readInput(positional[0]); err != nil {
			return err
		}
		var note string
		if note, err = signNote(string(text), s); err != nil {
			return err
		}
		_, err = io.WriteString(stdout, note)
		return err
	default:
		return usage("unknown command " + args[0])
	}
	if err != nil {
		return err
	}
	out, _ := json.Marshal(result)
	_, err = fmt.Fprintln(stdout, string(out))
	return err
}

type usageError struct{ msg string }

func (u usageError) Error() string { return "usage: " + u.msg }

func usage(msg string) error { return usageError{msg} }

func main() {
	err := run(os.Args[1:], os.Stdout)
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "tlogcheck:", err)
	var u usageError
	if errors.As(err, &u) {
		os.Exit(2)
	}
	os.Exit(1)
}
