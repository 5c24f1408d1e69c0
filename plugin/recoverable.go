package plugin

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hetgpu/hetgpu/plugin/proto/structs"
)

// RecoverableErrorTypeURL is the Any type URL Nomad looks for in a status detail.
const RecoverableErrorTypeURL = "type.googleapis.com/hashicorp.nomad.plugins.shared.structs.RecoverableError"

// RecoverableError wraps err as the gRPC status Nomad reads as (un)recoverable: code
// FailedPrecondition with a RecoverableError detail. Return it from StartTask (or TaskStats start);
// recoverable=true lets Nomad restart the task per its restart policy.
func RecoverableError(err error, recoverable bool) error {
	if err == nil {
		return nil
	}
	st, derr := status.New(codes.FailedPrecondition, err.Error()).WithDetails(&structs.RecoverableError{Recoverable: recoverable})
	if derr != nil {
		// Only fails if the detail cannot be marshalled, which a one-bool message cannot.
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	return st.Err()
}

// IsRecoverable reports whether err is a status from RecoverableError and, if so, its flag.
func IsRecoverable(err error) (recoverable, ok bool) {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return false, false
	}
	st := se.GRPCStatus()
	if st.Code() != codes.FailedPrecondition {
		return false, false
	}
	for _, d := range st.Details() {
		if re, isRE := d.(*structs.RecoverableError); isRE {
			return re.GetRecoverable(), true
		}
	}
	return false, false
}
