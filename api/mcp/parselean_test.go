package mcp

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// parseLeanMaps is parseLean as it was, on json.Unmarshal into maps: the oracle the
// in-place scanner is held to.
func parseLeanMaps(body []byte) (leanRequest, bool) {
	var msg map[string]json.RawMessage
	if err := json.Unmarshal(body, &msg); err != nil || len(msg) != 4 {
		return leanRequest{}, false
	}
	if string(msg["jsonrpc"]) != `"2.0"` || string(msg["method"]) != `"tools/call"` {
		return leanRequest{}, false
	}
	id, ok := leanID(msg["id"])
	if !ok {
		return leanRequest{}, false
	}
	var params map[string]json.RawMessage
	if err := json.Unmarshal(msg["params"], &params); err != nil || len(params) == 0 {
		return leanRequest{}, false
	}
	for k := range params {
		if k != "name" && k != "arguments" {
			return leanRequest{}, false
		}
	}
	name := params["name"]
	if len(name) < 2 || name[0] != '"' || !plain(name[1:len(name)-1]) {
		return leanRequest{}, false
	}
	return leanRequest{id: id, name: string(name[1 : len(name)-1]), args: params["arguments"]}, true
}

var leanCorpus = []string{
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"readFile","arguments":{"path":"f4k"}}}`,
	` { "jsonrpc" : "2.0" , "id" : "a-1" , "method" : "tools/call" , "params" : { "arguments" : { "path" : "x\"}" } , "name" : "readFile" } } `,
	`{"jsonrpc":"2.0","id":-12,"method":"tools/call","params":{"name":"readFile","arguments":[1,{"a":[2,"]"]},null,true,1.5e3]}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"readFile"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"readFile","arguments":null}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"readFile","name":"listFiles","arguments":{}}}`,
	`{"jsonrpc":"2.0","id":30,"id":31,"method":"tools/call","params":{"name":"readFile","arguments":{}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"readFile","arguments":{},"_meta":{"progressToken":"p"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":null}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[]}`,
	`{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"readFile"}}`,
	`{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"readFile"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"name":"readFile"}}`,
	`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"readFile"},"extra":1}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read\u0046ile"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":3}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":""}}`,
	`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"readFile"}}]`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"readFile"}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"readFile"}} x`,
	`{"jsonrpc":"2.0","\u0069d":1,"method":"tools/call","params":{"name":"readFile"}}`,
	`null`, `{}`, `""`, ``, `{"jsonrpc":"2.0"}`,
}

func sameLean(a, b leanRequest) bool {
	return a.id == b.id && a.name == b.name && string(a.args) == string(b.args)
}

// TestParseLeanMatchesMaps holds parseLean to the map-based parse on a corpus and on
// random mutations of it; the one difference allowed is a key with an escape in it,
// which the scanner leaves to the SDK.
func TestParseLeanMatchesMaps(t *testing.T) {
	check := func(body string) {
		t.Helper()
		got, gok := parseLean([]byte(body))
		want, wok := parseLeanMaps([]byte(body))
		if gok && (!wok || !sameLean(got, want)) {
			t.Fatalf("parseLean(%q) = %+v, %v; the maps give %+v, %v", body, got, gok, want, wok)
		}
		if !gok && wok && !escapedKey(body) {
			t.Fatalf("parseLean(%q) refused what the maps take: %+v", body, want)
		}
	}
	for _, body := range leanCorpus {
		check(body)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte(`{}[]",:\ 0123456789.-eE+tfnulrsajonpcidmhwxyz_/` + "\t\n")
	for range 200_000 {
		b := []byte(leanCorpus[rng.IntN(len(leanCorpus))])
		for range 1 + rng.IntN(3) {
			if len(b) == 0 {
				break
			}
			i := rng.IntN(len(b))
			switch rng.IntN(3) {
			case 0:
				b[i] = alphabet[rng.IntN(len(alphabet))]
			case 1:
				b = append(b[:i], b[i+1:]...)
			default:
				b = append(b[:i], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[i:]...)...)
			}
		}
		check(string(b))
	}
}

// escapedKey reports whether a string of body followed by ':' (a key) has an escape.
func escapedKey(body string) bool {
	for i := 0; i < len(body); i++ {
		if body[i] != '"' {
			continue
		}
		escaped := false
		j := i + 1
		for ; j < len(body) && body[j] != '"'; j++ {
			if body[j] == '\\' {
				escaped = true
				j++
			}
		}
		k := j + 1
		for k < len(body) && (body[k] == ' ' || body[k] == '\t' || body[k] == '\n' || body[k] == '\r') {
			k++
		}
		if escaped && k < len(body) && body[k] == ':' {
			return true
		}
		i = j
	}
	return false
}

// BenchmarkAppendString encodes a readFile result's JSON (4 KiB of text) as the text
// content, beside json.Marshal doing the same.
func BenchmarkAppendString(b *testing.B) {
	body, _ := json.Marshal(map[string]any{"path": "f4k", "size": 4096, "content": string(make([]byte, 0)) + stringsRepeat("0123456789abcdef\n", 256)})
	b.Run("appendString", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		buf := make([]byte, 0, 3*len(body))
		for b.Loop() {
			buf = appendString(buf[:0], body)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		s := string(body)
		for b.Loop() {
			_, _ = json.Marshal(s)
		}
	})
}

func stringsRepeat(s string, n int) string {
	out := make([]byte, 0, len(s)*n)
	for range n {
		out = append(out, s...)
	}
	return string(out)
}
