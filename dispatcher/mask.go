package dispatcher

import (
	"context"
	"errors"
	"fmt"

	"sless.dev/sless/rules"
)

// MaskingInvoker hides the values of the function's secrets (rules.SecretMasker) in what an
// invocation's answer leaves behind — the asynchronous result, its callback and the error the
// history keeps — so a function that echoes a secret it was given stores *** instead.
type MaskingInvoker struct {
	Inner Invoker
	// Masker is the function's masker now (nil: nothing to mask). When it fails, the answer's
	// body is withheld rather than kept unmasked.
	Masker func(ctx context.Context) (*rules.SecretMasker, error)
}

func (m MaskingInvoker) Invoke(ctx context.Context, c Call) (Result, error) {
	res, err := m.Inner.Invoke(ctx, c)
	mask, merr := m.Masker(ctx)
	if merr != nil {
		res.Body, res.Truncated, res.ContentType = nil, false, ""
		var fe *FunctionError
		if errors.As(err, &fe) {
			err = fmt.Errorf("function answered HTTP %d (its body withheld: %w)", fe.Status, merr)
		}
		return res, err
	}
	if mask == nil {
		return res, err
	}
	if len(res.Body) > 0 {
		res.Body = []byte(mask.Mask(string(res.Body)))
	}
	if err != nil && mask.Mask(err.Error()) != err.Error() {
		err = errors.New(mask.Mask(err.Error())) // only then: errors.Is still tells a timeout
	}
	return res, err
}
