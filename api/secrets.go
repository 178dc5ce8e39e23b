package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/cwsdev/cws/workspace"
)

// The tenant's secrets (scope secrets): written, listed and deleted, never read back.

// SecretList is the body of GET /v1/secrets.
type SecretList struct {
	Secrets []workspace.SecretInfo `json:"secrets"`
	Count   int                    `json:"count"`
}

func (s *Server) putSecret(c *gin.Context) {
	var in workspace.SecretInput
	if err := decodeJSON(c, &in); err != nil {
		fail(c, s.log, err)
		return
	}
	info, created, err := s.cfg.Service.PutSecret(c.Request.Context(), caller(c), c.Param("name"), in)
	if err != nil {
		fail(c, s.log, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	c.JSON(status, info)
}

func (s *Server) listSecrets(c *gin.Context) {
	all, err := s.cfg.Service.ListSecrets(c.Request.Context(), caller(c))
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, SecretList{Secrets: all, Count: len(all)})
}

func (s *Server) deleteSecret(c *gin.Context) {
	if err := s.cfg.Service.DeleteSecret(c.Request.Context(), caller(c), c.Param("name")); err != nil {
		fail(c, s.log, err)
		return
	}
	c.Status(http.StatusNoContent)
}
