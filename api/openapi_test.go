package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/cwsdev/cws/auth"
)

// TestOpenAPIMatchesRoutes checks /openapi.json against the routes gin really serves.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	ts, _ := auth.NewDevTenants()
	s := New(Config{Verifier: auth.NewVerifier(ts, auth.VerifierOptions{})})
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d", rec.Code)
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("not an OpenAPI 3 document: %v", err)
	}
	var documented, served []string
	for p, ops := range doc.Paths {
		for m := range ops {
			documented = append(documented, strings.ToUpper(m)+" "+p)
		}
	}
	for _, r := range s.Routes() {
		p, _ := openapiPath(r.Path)
		served = append(served, r.Method+" "+p)
	}
	sort.Strings(documented)
	sort.Strings(served)
	if strings.Join(documented, "\n") != strings.Join(served, "\n") {
		t.Fatalf("OpenAPI and router differ:\ndocumented:\n%s\nserved:\n%s", strings.Join(documented, "\n"), strings.Join(served, "\n"))
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	ts, _ := auth.NewDevTenants()
	s := New(Config{Verifier: auth.NewVerifier(ts, auth.VerifierOptions{})})
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/nope", 404},
		{"PATCH", "/v1/sessions", 405},
	} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		var body ErrorBody
		if rec.Code != tc.status || json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error.Code == "" {
			t.Fatalf("%s %s: %d %s", tc.method, tc.path, rec.Code, rec.Body)
		}
	}
}
