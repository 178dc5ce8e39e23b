package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace"
)

// SnapshotView is a snapshot as the API shows it.
type SnapshotView struct {
	ID        string            `json:"id"`
	Session   string            `json:"session"`
	Name      string            `json:"name"`
	CreatedAt time.Time         `json:"createdAt"`
	ExpiresAt time.Time         `json:"expiresAt,omitzero"`
	Bytes     int64             `json:"bytes"`
	Files     int               `json:"files"`
	Image     string            `json:"image"`
	Labels    map[string]string `json:"labels,omitempty"`
	// Skipped lists what the snapshot left out (FIFOs, sockets, devices), and why.
	Skipped []agent.TarSkip `json:"skipped,omitempty"`
}

func snapshotView(m *workspace.Snapshot) SnapshotView {
	return SnapshotView{ID: m.ID, Session: m.Session, Name: m.Name, CreatedAt: m.CreatedAt, ExpiresAt: m.ExpiresAt,
		Bytes: m.Bytes, Files: m.Files, Image: m.Image, Labels: m.Labels, Skipped: m.Skipped}
}

// CreateSnapshotRequest is the body of POST /v1/sessions/{id}/snapshots (optional).
type CreateSnapshotRequest struct {
	Name string `json:"name,omitempty"`
}

func (s *Server) createSnapshot(c *gin.Context) {
	var req CreateSnapshotRequest
	if err := decodeOptionalJSON(c, &req); err != nil {
		fail(c, s.log, err)
		return
	}
	m, err := s.cfg.Service.CreateSnapshot(c.Request.Context(), caller(c), c.Param("id"), req.Name)
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.Header("Location", "/v1/snapshots/"+m.ID)
	c.JSON(http.StatusCreated, snapshotView(m))
}

// SnapshotList is the body of GET /v1/snapshots.
type SnapshotList struct {
	Snapshots []SnapshotView `json:"snapshots"`
	Count     int            `json:"count"`
}

func (s *Server) listSnapshots(c *gin.Context) {
	all, err := s.cfg.Service.ListSnapshots(c.Request.Context(), caller(c))
	if err != nil {
		fail(c, s.log, err)
		return
	}
	out := SnapshotList{Snapshots: make([]SnapshotView, 0, len(all))}
	for _, m := range all {
		out.Snapshots = append(out.Snapshots, snapshotView(m))
	}
	out.Count = len(out.Snapshots)
	c.JSON(http.StatusOK, out)
}

func (s *Server) getSnapshot(c *gin.Context) {
	m, err := s.cfg.Service.GetSnapshot(c.Request.Context(), caller(c), c.Param("id"))
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, snapshotView(m))
}

func (s *Server) deleteSnapshot(c *gin.Context) {
	if err := s.cfg.Service.DeleteSnapshot(c.Request.Context(), caller(c), c.Param("id")); err != nil {
		fail(c, s.log, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// ForkRequest is the body of POST /v1/sessions/{id}/fork.
type ForkRequest struct {
	Count json.RawMessage `json:"count"`
}

// ForkResponse is what a fork made: the new sessions, and an error for each one it
// could not make.
type ForkResponse struct {
	Sessions []SessionView `json:"sessions"`
	Errors   []ErrorBody   `json:"errors"`
}

func (s *Server) forkSession(c *gin.Context) {
	var req ForkRequest
	if err := decodeOptionalJSON(c, &req); err != nil {
		fail(c, s.log, err)
		return
	}
	count := 1
	if len(req.Count) > 0 {
		dec := json.NewDecoder(bytes.NewReader(req.Count))
		if err := dec.Decode(&count); err != nil {
			fail(c, s.log, fmt.Errorf("%w: count: want a whole number from 1 to %d, got %s", workspace.ErrInvalid, workspace.MaxFork, req.Count))
			return
		}
	}
	res, err := s.cfg.Service.Fork(c.Request.Context(), caller(c), c.Param("id"), count)
	if err != nil {
		fail(c, s.log, err)
		return
	}
	out := ForkResponse{Sessions: []SessionView{}, Errors: []ErrorBody{}}
	for i, sess := range res.Sessions {
		if err := res.Errors[i]; err != nil {
			out.Errors = append(out.Errors, errorBody(err))
			continue
		}
		out.Sessions = append(out.Sessions, s.view(sess))
	}
	status := http.StatusCreated
	if len(out.Sessions) == 0 {
		status, _ = statusOf(res.Errors[0]) // none made: the first reason is the answer's
	}
	c.JSON(status, out)
}

// decodeOptionalJSON decodes a JSON body when there is one.
func decodeOptionalJSON(c *gin.Context, v any) error {
	if c.Request.ContentLength == 0 {
		return nil
	}
	if c.Request.ContentLength < 0 {
		// Chunked: peek for an empty body.
		b, err := io.ReadAll(io.LimitReader(c.Request.Body, 1))
		if err != nil || len(b) == 0 {
			return nil
		}
		c.Request.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), c.Request.Body))
	}
	return decodeJSON(c, v)
}
