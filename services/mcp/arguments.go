package mcpserver

import (
	"context"
	"regexp"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxio/sandboxio/pkg/events"
)

var (
	schemaField   = regexp.MustCompile(`/properties/([A-Za-z0-9_]+)`)
	missingFields = regexp.MustCompile(`missing properties: \[?"?([A-Za-z0-9_]+)`)
)

// argumentErrors is receiving middleware for the SDK's own refusals of a
// tools/call: arguments that fail the tool's input schema or do not
// decode come back from the SDK as a tool error with its text only. They
// become tool errors like every other, with an SBX code (SBX_E1003 for a
// missing property, SBX_E1007 otherwise), the field, and what to do. A
// tool's own errors carry structured content and pass unchanged.
func argumentErrors(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		r, ok := res.(*mcp.CallToolResult)
		if err != nil || method != "tools/call" || !ok || !r.IsError || r.StructuredContent != nil {
			return res, err
		}
		var text strings.Builder
		for _, c := range r.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text.WriteString(tc.Text)
			}
		}
		e := events.Errorf(events.CodeInvalidValue, "the arguments do not fit the tool's input schema: %s", text.String())
		if m := missingFields.FindStringSubmatch(text.String()); m != nil {
			e = events.Errorf(events.CodeMissingField, "the arguments lack %s: %s", m[1], text.String()).With("field", m[1])
		} else if m := schemaField.FindStringSubmatch(text.String()); m != nil {
			e = e.With("field", m[1])
		}
		return toolError(e), nil
	}
}
