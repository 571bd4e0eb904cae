//! Bearer-token authentication of `/api/v1`: a middleware that turns `Authorization: Bearer
//! kiln_…` into the caller's [`Team`] (a request extension) or answers 401.

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, AppState, token};

/// The team a request acts for, from its token. Handlers scope every query to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Team(pub String);

/// The token in an `Authorization` header value: `Bearer <token>` (scheme case-insensitive).
///
/// # Errors
/// [`ApiError::Unauthorized`] when the scheme is not `Bearer` or the token is empty.
pub fn bearer(value: &str) -> Result<&str, ApiError> {
    let (scheme, rest) = value.trim().split_once(' ').ok_or(ApiError::Unauthorized {
        reason: "the Authorization header is not `Bearer <token>`",
    })?;
    let token = rest.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(ApiError::Unauthorized {
            reason: "the Authorization header is not `Bearer <token>`",
        });
    }
    Ok(token)
}

/// Resolve the request's token to its team, or answer 401 (missing header, malformed, unknown or
/// revoked token — one message for the last three, so the answer says nothing about which tokens
/// exist).
pub(crate) async fn require_token(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let header = req.headers().get(header::AUTHORIZATION).cloned();
    let team = match team_of(&state, header.as_ref()).await {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    req.extensions_mut().insert(Team(team));
    next.run(req).await
}

async fn team_of(
    state: &AppState,
    authorization: Option<&axum::http::HeaderValue>,
) -> Result<String, ApiError> {
    let value = authorization
        .ok_or(ApiError::Unauthorized {
            reason: "missing Authorization header",
        })?
        .to_str()
        .map_err(|_| ApiError::Unauthorized {
            reason: "the Authorization header is not ASCII",
        })?;
    let invalid = ApiError::Unauthorized {
        reason: "invalid or revoked token",
    };
    let hash = token::parse(bearer(value)?).map_err(|_| invalid)?;
    match token::team_for(state.queue.db(), &hash).await {
        Ok(Some(team)) => Ok(team),
        Ok(None) => Err(ApiError::Unauthorized {
            reason: "invalid or revoked token",
        }),
        Err(e) => Err(ApiError::Internal {
            message: super::error::chain(&e),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_takes_the_token_after_the_scheme_in_any_case() {
        assert_eq!(bearer("Bearer kiln_x").unwrap(), "kiln_x");
        assert_eq!(bearer("bearer   kiln_x ").unwrap(), "kiln_x");
    }

    #[test]
    fn bearer_rejects_other_schemes_and_empty_tokens() {
        for v in ["Basic a2lsbjp4", "Bearer", "Bearer   ", "kiln_x"] {
            assert!(bearer(v).is_err(), "{v}");
        }
    }
}
