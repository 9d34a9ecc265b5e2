//! The console end to end, as one test binary: the API over real HTTP against a real broker, dev
//! mode, and the approval pages in headless Chromium.

mod api;
mod asks;
mod browser;
mod common;
mod delivery;
mod dev;
mod discover;
mod documents;
mod first_day;
mod issued_grants;
mod mcp;
mod messages;
mod notify;
mod one_name;
mod ops;
mod pages;
mod passkeys;
mod person;
mod person_pages;
mod repos;
mod responsive;
mod search_pages;
mod work;
mod work_pages;
