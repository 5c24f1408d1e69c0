package plugin

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestRecoverableError(t *testing.T) {
	for _, rec := range []bool{true, false} {
		err := RecoverableError(errors.New("image pull failed"), rec)
		st, ok := status.FromError(err)
		if !ok || st.Code() != codes.FailedPrecondition || st.Message() != "image pull failed" {
			t.Fatalf("status = %v", st)
		}
		details := st.Proto().GetDetails()
		if len(details) != 1 || details[0].GetTypeUrl() != RecoverableErrorTypeURL {
			t.Fatalf("details = %v", details)
		}
		if RecoverableErrorTypeURL != "type.googleapis.com/hashicorp.nomad.plugins.shared.structs.RecoverableError" {
			t.Fatal("type URL constant differs from Nomad's")
		}
		got, ok := IsRecoverable(err)
		if !ok || got != rec {
			t.Errorf("IsRecoverable = %v, %v; want %v, true", got, ok, rec)
		}
	}
	if RecoverableError(nil, true) != nil {
		t.Error("nil error must stay nil")
	}
	if _, ok := IsRecoverable(errors.New("plain")); ok {
		t.Error("plain error reported as recoverable status")
	}
}
