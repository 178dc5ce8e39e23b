package testenv_test

import (
	"errors"
	"net"
	"net/url"
	"testing"

	"github.com/cwsdev/cws/internal/testenv"
)

func TestRedisAnswers(t *testing.T) {
	u, err := url.Parse(testenv.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatalf("dial %s: %v", u.Host, err)
	}
	conn.Close()
}

func TestRequireCINilIsNoop(t *testing.T) {
	testenv.RequireCI(t, "nothing", nil)
}

func TestRequireCISkipsLocally(t *testing.T) {
	t.Setenv("CI", "")
	ran := false
	t.Run("inner", func(t *testing.T) {
		defer func() { ran = true }()
		testenv.RequireCI(t, "thing", errors.New("absent"))
		t.Error("RequireCI returned on error")
	})
	if !ran {
		t.Fatal("inner test did not finish")
	}
}
