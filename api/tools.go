package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/cwsdev/cws/workspace"
	"github.com/gin-gonic/gin"
)

// ToolResponse is the body of a REST tool call.
type ToolResponse struct {
	Result  any    `json:"result"`
	IsError bool   `json:"isError"`
	Note    string `json:"note,omitempty"` // e.g. how many locations in denied paths were left out
}

func (s *Server) callTool(c *gin.Context) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxJSONBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			err = fmt.Errorf("%w: request body over %d bytes", workspace.ErrTooLarge, maxJSONBody)
		}
		fail(c, s.log, err)
		return
	}
	if len(body) > 0 && !json.Valid(body) {
		fail(c, s.log, fmt.Errorf("%w: the body must be the tool's arguments as a JSON object", workspace.ErrInvalid))
		return
	}
	res, err := s.cfg.Service.Call(c.Request.Context(), caller(c), c.Param("id"), c.Param("tool"), body, workspace.CallOptions{})
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, ToolResponse{Result: res.Value, IsError: res.IsError, Note: res.Note})
}
