//! The work pages (issue 27): projects, issue lists, the issue page as the conversation.
