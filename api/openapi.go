package api

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/cwsdev/cws/version"
	"github.com/gin-gonic/gin"
)

// OpenAPI builds the OpenAPI 3 document from the route table.
func (s *Server) OpenAPI() map[string]any {
	paths := map[string]any{}
	for _, r := range s.routes() {
		p, params := openapiPath(r.path)
		item, _ := paths[p].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[p] = item
		}
		for _, m := range r.methods() {
			op := map[string]any{
				"summary":     r.summary,
				"operationId": strings.ToLower(m) + strings.NewReplacer("/", "_", "{", "", "}", "", ".", "_", "-", "_").Replace(p),
				"responses": map[string]any{
					strconv.Itoa(r.status): response(r.response),
					"default":              map[string]any{"description": "Error", "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Error"}}}},
				},
			}
			if len(params) > 0 {
				op["parameters"] = params
			}
			if r.auth || strings.Contains(r.path, "mcp") {
				op["security"] = []any{map[string]any{"bearer": []any{}}}
			}
			if r.request != "" && m != http.MethodGet && m != http.MethodDelete {
				op["requestBody"] = map[string]any{"content": map[string]any{r.request: map[string]any{}}}
			}
			item[strings.ToLower(m)] = op
		}
	}
	return map[string]any{
		"openapi": "3.0.3",
		"info":    map[string]any{"title": "cws — Coding Workspace Service", "version": version.Version},
		"paths":   paths,
		"components": map[string]any{
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
			"schemas": map[string]any{"Error": map[string]any{
				"type": "object", "required": []string{"error"},
				"properties": map[string]any{"error": map[string]any{"type": "object", "required": []string{"code", "message"},
					"properties": map[string]any{"code": map[string]any{"type": "string"}, "message": map[string]any{"type": "string"},
						"rpcCode": map[string]any{"type": "integer"}, "path": map[string]any{"type": "string"}, "rule": map[string]any{"type": "string"}}}},
			}},
		},
	}
}

func response(media string) map[string]any {
	r := map[string]any{"description": "Success"}
	if media != "" {
		r["content"] = map[string]any{media: map[string]any{}}
	}
	return r
}

// openapiPath turns /v1/sessions/:id into /v1/sessions/{id} and lists its parameters.
func openapiPath(p string) (string, []any) {
	var params []any
	parts := strings.Split(p, "/")
	for i, part := range parts {
		if name, ok := strings.CutPrefix(part, ":"); ok {
			parts[i] = "{" + name + "}"
			params = append(params, map[string]any{"name": name, "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
	}
	return strings.Join(parts, "/"), params
}

func (s *Server) openapi(c *gin.Context) { c.JSON(http.StatusOK, s.OpenAPI()) }
