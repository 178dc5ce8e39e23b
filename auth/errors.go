package auth

import (
	"errors"
)

// Reasons a token is rejected. They are bounded, so they make metric labels.
const (
	ReasonMissingToken    = "missing_token"    // no bearer token in the request
	ReasonTooLarge        = "too_large"        // longer than VerifierOptions.MaxTokenSize
	ReasonMalformed       = "malformed"        // not a JWS compact token, or claims of the wrong type
	ReasonAlg             = "alg"              // alg unsupported or not the chosen key's alg
	ReasonTenant          = "tenant"           // unknown tenant, or key/issuer of another tenant
	ReasonIssuer          = "issuer"           // iss is not the tenant's issuer
	ReasonAudience        = "audience"         // aud does not include the tenant's audience
	ReasonUnknownKey      = "unknown_key"      // kid not found (after one JWKS refresh)
	ReasonKeysUnavailable = "keys_unavailable" // the tenant's JWKS could not be fetched
	ReasonSignature       = "signature"        // no key of the tenant verifies the signature
	ReasonExpired         = "expired"          // exp has passed (beyond the leeway)
	ReasonNotYetValid     = "not_yet_valid"    // nbf or iat in the future (beyond the leeway)
	ReasonMissingClaim    = "missing_claim"    // exp, aud, iss, sub or tenant is missing
	ReasonOther           = "other"            // an error that did not come from this package
)

// Reasons lists every reason, so metrics can start each label at zero.
var Reasons = []string{
	ReasonMissingToken, ReasonTooLarge, ReasonMalformed, ReasonAlg, ReasonTenant,
	ReasonIssuer, ReasonAudience, ReasonUnknownKey, ReasonKeysUnavailable,
	ReasonSignature, ReasonExpired, ReasonNotYetValid, ReasonMissingClaim, ReasonOther,
}

// ErrInvalidToken matches (with errors.Is) every error that [Verifier.Verify]
// returns, so an error table can map it to 401 without knowing [Error].
var ErrInvalidToken = errors.New("invalid token")

// Error is a rejected token. Its message is safe to show the client: it never
// contains key material or the token.
type Error struct {
	Reason string // one of Reasons
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// Is makes every *Error match [ErrInvalidToken].
func (e *Error) Is(target error) bool { return target == ErrInvalidToken }

// ReasonOf returns the reason of an *Error in err's chain, "" for nil, and
// [ReasonOther] for any other error.
func ReasonOf(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ReasonOther
}

// reject builds an *Error whose message is msg and whose chain holds cause,
// so the client sees a short message while errors.Is still finds the cause.
func reject(reason, msg string, cause error) *Error {
	return &Error{Reason: reason, Err: &causeError{msg: msg, cause: cause}}
}

type causeError struct {
	msg   string
	cause error
}

func (e *causeError) Error() string { return e.msg }

func (e *causeError) Unwrap() error { return e.cause }
