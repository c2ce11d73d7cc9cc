package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
)

// ClaimsUpdateSubject is where nats-server (full resolver) takes account
// JWT updates from a system account user.
const ClaimsUpdateSubject = "$SYS.REQ.CLAIMS.UPDATE"

// ErrPushRefused: the server answered a push with an error.
var ErrPushRefused = errors.New("auth: server refused the account update")

// Push sends an account JWT to a running server over sys, a connection
// with the SYS user's creds, and waits (bounded by ctx) for the server to
// accept it: a new tenant can connect, a revoked user is cut off, without
// a restart. With a cluster the update spreads from the first server.
func Push(ctx context.Context, sys *nats.Conn, accountJWT string) error {
	ac, err := jwt.DecodeAccountClaims(accountJWT)
	if err != nil {
		return fmt.Errorf("auth: push: not an account JWT: %w", err)
	}
	msg, err := sys.RequestWithContext(ctx, ClaimsUpdateSubject, []byte(accountJWT))
	if err != nil {
		return fmt.Errorf("auth: push account %s (%s): %w", ac.Name, ac.Subject, err)
	}
	var resp struct {
		Data *struct {
			Account string `json:"account"`
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"data"`
		Error *struct {
			Account     string `json:"account"`
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("auth: push account %s: bad answer: %w", ac.Name, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("%w: account %s (%s): %d %s", ErrPushRefused, ac.Name, ac.Subject, resp.Error.Code, resp.Error.Description)
	}
	if resp.Data == nil {
		return fmt.Errorf("%w: account %s: empty answer", ErrPushRefused, ac.Name)
	}
	return nil
}
