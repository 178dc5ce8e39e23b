package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
)

// MaxPolicyBytes is the largest policy file Parse reads.
const MaxPolicyBytes = 1 << 20

// seedFields are the fields a workspace file may use: the seed's seven, and
// requireLandlock (which can only turn enforcement on). Every other Policy field is
// tenant-only.
var seedFields = []string{
	"allowedPaths", "deniedPaths", "maxFileSize", "maxEditSize",
	"allowedCommands", "envAllowlist", "confirmationRequired", "requireLandlock",
	"suspendAfter",            // a workspace may only shorten it (Narrow)
	"network", "previewPorts", // a workspace may only narrow them
}

// Parse reads a tenant's policy strictly: one JSON object, each field at most once and
// spelled exactly (encoding/json would otherwise accept "AllowedPaths"), no unknown
// field, nothing after it, and every value valid (see Validate). Errors wrap
// ErrInvalid and name the offending field, e.g.
// `invalid params: unknown field "maxFileSzie" in .cws-policy.json`.
func Parse(data []byte) (*Policy, error) {
	return parse(data, false)
}

// ParseWorkspace is Parse for the .cws-policy.json in a workspace root, which may only
// use the seed's seven fields, requireLandlock and suspendAfter; a tenant-only field (limits, network, …) is an error
// naming it. Parse errors wrap ErrInvalid; the caller decides whether a broken
// workspace file fails the call (it must never be ignored: that would widen).
func ParseWorkspace(data []byte) (*Policy, error) {
	return parse(data, true)
}

func parse(data []byte, workspace bool) (*Policy, error) {
	if len(data) > MaxPolicyBytes {
		return nil, invalidf("%s is larger than %d bytes", FileName, MaxPolicyBytes)
	}
	fields, err := objectFields(data, "")
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"limits", "rate", "egress"} {
		if raw, ok := fields[name]; ok && !isNull(raw) {
			if _, err := objectFields(raw, name+"."); err != nil {
				return nil, err
			}
		}
	}
	if workspace {
		for name := range fields {
			if !slices.Contains(seedFields, name) {
				return nil, invalidf("field %q is tenant-only and not allowed in a workspace %s", name, FileName)
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Policy
	if err := dec.Decode(&p); err != nil {
		return nil, invalidf("%s: %v", FileName, err)
	}
	if workspace && p.Network != nil && p.Network.Direct {
		return nil, invalidf(`network "direct" is tenant-only and not allowed in a workspace %s (a workspace file may only narrow the network)`, FileName)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// objectFields reads data as one JSON object of known fields (the json tags of
// Policy, Limits or Rate, chosen by prefix) and returns them by name. It refuses
// anything else, an unknown or repeated field, and trailing data.
func objectFields(data []byte, prefix string) (map[string]json.RawMessage, error) {
	known := knownFields[prefix]
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, invalidf("%s%s must be a JSON object", strings.TrimSuffix(prefix, "."), orFile(prefix))
	}
	fields := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, invalidf("%s: %v", FileName, err)
		}
		name := tok.(string) // object keys are always strings
		if !slices.Contains(known, name) {
			return nil, invalidf("unknown field %q in %s", prefix+name, FileName)
		}
		if _, dup := fields[name]; dup {
			return nil, invalidf("field %q appears twice in %s", prefix+name, FileName)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, invalidf("field %q in %s: %v", prefix+name, FileName, err)
		}
		fields[name] = raw
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, invalidf("%s: %v", FileName, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalidf("trailing data after the object in %s", FileName)
	}
	return fields, nil
}

// knownFields are the exact JSON names of each object's fields, by prefix.
var knownFields = map[string][]string{
	"":        jsonNames(reflect.TypeFor[Policy]()),
	"limits.": jsonNames(reflect.TypeFor[Limits]()),
	"rate.":   jsonNames(reflect.TypeFor[Rate]()),
	"egress.": jsonNames(reflect.TypeFor[Egress]()),
}

func jsonNames(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		names = append(names, name)
	}
	return names
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

func orFile(prefix string) string {
	if prefix == "" {
		return FileName
	}
	return " in " + FileName
}

// invalidf returns an error wrapping ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
