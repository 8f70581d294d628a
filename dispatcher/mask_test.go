package dispatcher

import (
	"context"
	"errors"
	"strings"
	"testing"

	"sless.dev/sless/rules"
)

type answer struct {
	res Result
	err error
}

func (a answer) Invoke(context.Context, Call) (Result, error) { return a.res, a.err }

func TestMaskingInvoker(t *testing.T) {
	const secret = "s3cr3t-value"
	masker := func(context.Context) (*rules.SecretMasker, error) {
		return rules.NewSecretMasker([][]byte{[]byte(secret)}), nil
	}
	broken := func(context.Context) (*rules.SecretMasker, error) { return nil, errors.New("forbidden") }
	failed := &FunctionError{Status: 500, Body: "bad " + secret}
	for _, tc := range []struct {
		name     string
		inner    answer
		masker   func(context.Context) (*rules.SecretMasker, error)
		wantBody string
		wantErr  string
	}{
		{"body masked", answer{res: Result{Status: 200, Body: []byte("pw=" + secret)}}, masker, "pw=" + rules.SecretMask, ""},
		{"error masked", answer{res: Result{Status: 500}, err: failed}, masker, "", "function answered HTTP 500: bad " + rules.SecretMask},
		{"nothing to mask", answer{res: Result{Status: 200, Body: []byte("plain")}}, func(context.Context) (*rules.SecretMasker, error) { return nil, nil }, "plain", ""},
		{"masker failed: body withheld", answer{res: Result{Status: 200, Body: []byte(secret), ContentType: "text/plain"}}, broken, "", ""},
		{"masker failed: error body withheld", answer{res: Result{Status: 500}, err: failed}, broken, "", "function answered HTTP 500 (its body withheld: forbidden)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := MaskingInvoker{Inner: tc.inner, Masker: tc.masker}.Invoke(context.Background(), Call{})
			if string(res.Body) != tc.wantBody {
				t.Errorf("body %q, want %q", res.Body, tc.wantBody)
			}
			if got := ""; err != nil {
				got = err.Error()
				if got != tc.wantErr {
					t.Errorf("error %q, want %q", got, tc.wantErr)
				}
			} else if tc.wantErr != "" {
				t.Errorf("no error, want %q", tc.wantErr)
			}
			if strings.Contains(string(res.Body), secret) {
				t.Errorf("the value survived: %q", res.Body)
			}
		})
	}
}
