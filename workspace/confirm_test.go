package workspace_test

import (
	"context"
	"errors"
	"testing"

	"github.com/cwsdev/cws/workspace"
)

// Any tool named in confirmationRequired needs confirmed: true, not just runCommand.
func TestConfirmationForAnyTool(t *testing.T) {
	svc, caller, id, _ := newEnv(t, `{"confirmationRequired":["deleteFile"]}`)
	ctx := context.Background()
	if _, err := svc.Call(ctx, caller, id, "writeFile", []byte(`{"path":"x","contents":"1"}`), workspace.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := svc.Call(ctx, caller, id, "deleteFile", []byte(`{"path":"x"}`), workspace.CallOptions{})
	if !errors.Is(err, workspace.ErrConfirm) {
		t.Fatalf("unconfirmed deleteFile: got %v, want ErrConfirm", err)
	}
	res, err := svc.Call(ctx, caller, id, "deleteFile", []byte(`{"path":"x","confirmed":true}`), workspace.CallOptions{})
	if err != nil || res.IsError {
		t.Fatalf("confirmed deleteFile: %+v %v", res, err)
	}
	if res, err := svc.Call(ctx, caller, id, "readFile", []byte(`{"path":"x"}`), workspace.CallOptions{}); err != nil || !res.IsError {
		t.Fatalf("the confirmed delete did not delete: %+v %v", res, err)
	}
}
