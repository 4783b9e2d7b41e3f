//! [`parse`]: MIL text to a [`Program`]. Reads what [`super::print`] writes and the forms real
//! `model.mil` files use: `program(1.0)`/`program(1.3)`, `ios1x`/`CoreMLx` opsets, old scalar
//! spellings (`tensor<int32, []>(1)`), hex and decimal floats, `inf`/`nan`, symbolic dims,
//! ops without attributes, both multi-output forms, function attributes.

use super::float::{parse_hex, round_f64_to};
use super::lexer::{lex, Tok, Token};
use super::ParseError;
use crate::ast::*;

pub fn parse(source: &str) -> std::result::Result<Program, ParseError> {
    let tokens = lex(source)?;
    Parser {
        tokens,
        pos: 0,
        depth: 0,
    }
    .program()
}

/// Deepest nesting of lists, tuples, dicts and types accepted (bounds the parser's recursion).
const MAX_NESTING: usize = 64;

type Result<T> = std::result::Result<T, ParseError>;

/// An untyped value as written, with where it starts.
#[derive(Debug)]
struct Raw {
    kind: RawKind,
    line: usize,
    column: usize,
}

#[derive(Debug)]
enum RawKind {
    Int(String),
    Float(String),
    Str(String),
    Bool(bool),
    List(Vec<Raw>),
    Tuple(Vec<Raw>),
    Dict(Vec<(Raw, Raw)>),
}

impl RawKind {
    fn describe(&self) -> String {
        match self {
            RawKind::Int(s) | RawKind::Float(s) => format!("'{s}'"),
            RawKind::Str(s) => format!("string {s:?}"),
            RawKind::Bool(b) => format!("'{b}'"),
            RawKind::List(_) => "a '[...]' list".into(),
            RawKind::Tuple(_) => "a '(...)' tuple".into(),
            RawKind::Dict(_) => "a '{...}' dict".into(),
        }
    }
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    depth: usize,
}

fn err_at(line: usize, column: usize, message: impl Into<String>) -> ParseError {
    ParseError {
        line,
        column,
        message: message.into(),
    }
}

impl Parser {
    fn peek(&self) -> &Tok {
        self.peek_at(0)
    }

    fn peek_at(&self, ahead: usize) -> &Tok {
        let i = (self.pos + ahead).min(self.tokens.len().saturating_sub(1));
        self.tokens.get(i).map_or(&Tok::Eof, |t| &t.tok)
    }

    fn here(&self) -> (usize, usize) {
        let i = self.pos.min(self.tokens.len().saturating_sub(1));
        self.tokens.get(i).map_or((1, 1), |t| (t.line, t.column))
    }

    fn next(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.pos < self.tokens.len() {
            self.pos += 1;
        }
        t
    }

    fn error(&self, message: impl Into<String>) -> ParseError {
        let (line, column) = self.here();
        err_at(line, column, message)
    }

    /// `expected <what>, found <token>` at the current token.
    fn expected(&self, what: &str) -> ParseError {
        self.error(format!("expected {what}, found {}", self.peek().describe()))
    }

    fn nest(&mut self) -> Result<()> {
        if self.depth >= MAX_NESTING {
            return Err(self.error(format!("nesting deeper than {MAX_NESTING} levels")));
        }
        self.depth += 1;
        Ok(())
    }

    fn is_punct(&self, c: char) -> bool {
        *self.peek() == Tok::Punct(c)
    }

    fn eat_punct(&mut self, c: char) -> bool {
        if self.is_punct(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn punct(&mut self, c: char, what: &str) -> Result<()> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            Err(self.expected(what))
        }
    }

    fn ident(&mut self, what: &str) -> Result<String> {
        match self.peek() {
            Tok::Ident(s) => {
                let s = s.clone();
                self.pos += 1;
                Ok(s)
            }
            _ => Err(self.expected(what)),
        }
    }

    fn keyword(&mut self, word: &str) -> Result<()> {
        match self.peek() {
            Tok::Ident(s) if s == word => {
                self.pos += 1;
                Ok(())
            }
            _ => Err(self.expected(&format!("'{word}'"))),
        }
    }

    fn program(&mut self) -> Result<Program> {
        self.keyword("program")?;
        self.punct('(', "'(' after 'program'")?;
        let version = match self.next() {
            Tok::Int(s) | Tok::Float(s) => s,
            _ => {
                self.pos -= 1;
                return Err(self.expected("a program version such as 1.3"));
            }
        };
        self.punct(')', "')' after the program version")?;
        let attributes = if self.is_punct('[') {
            self.attribute_list("program")?
        } else {
            Vec::new()
        };
        self.punct('{', "'{' to open the program body")?;
        let mut functions = Vec::new();
        while !self.is_punct('}') {
            match self.peek() {
                Tok::Ident(s) if s == "func" => functions.push(self.function()?),
                _ => return Err(self.expected("'func' or '}' in the program body")),
            }
        }
        self.pos += 1;
        if *self.peek() != Tok::Eof {
            return Err(self.expected("the end of the input after the program's closing '}'"));
        }
        Ok(Program {
            version,
            attributes,
            functions,
        })
    }

    fn function(&mut self) -> Result<Function> {
        self.keyword("func")?;
        let name = self.ident("a function name")?;
        self.punct('<', &format!("'<' and an opset after function '{name}'"))?;
        let opset = self.ident("an opset such as ios18")?;
        self.punct('>', "'>' after the opset")?;
        self.punct('(', &format!("'(' to open the inputs of function '{name}'"))?;
        let mut inputs = Vec::new();
        if !self.eat_punct(')') {
            loop {
                inputs.push(self.named_value("a function input")?);
                if self.eat_punct(')') {
                    break;
                }
                self.punct(',', "',' or ')' after a function input")?;
            }
        }
        let mut attributes = Vec::new();
        if self.eat_punct('[') {
            loop {
                let attr = self.ident("a function attribute name")?;
                self.punct('=', &format!("'=' after attribute '{attr}'"))?;
                let ty = self.compound_type()?;
                self.punct('(', &format!("'(' and a value for attribute '{attr}'"))?;
                let raw = self.raw()?;
                self.punct(')', &format!("')' after the value of attribute '{attr}'"))?;
                attributes.push((
                    attr,
                    CompoundLiteral {
                        ty,
                        value: compound_value(raw)?,
                    },
                ));
                if self.eat_punct(']') {
                    break;
                }
                self.punct(',', "',' or ']' after a function attribute")?;
            }
        }
        self.punct('{', &format!("'{{' to open the body of function '{name}'"))?;
        let body = self.block_body(Vec::new())?;
        self.punct(';', &format!("';' after the outputs of function '{name}'"))?;
        Ok(Function {
            name,
            opset,
            inputs,
            attributes,
            body,
        })
    }

    /// Statements up to `}`, then `-> (outputs)`; the opening `{` is already consumed.
    fn block_body(&mut self, inputs: Vec<NamedValue>) -> Result<Block> {
        let mut operations = Vec::new();
        while !self.eat_punct('}') {
            if *self.peek() == Tok::Eof {
                return Err(self.expected("a statement or '}'"));
            }
            operations.push(self.operation()?);
        }
        if *self.peek() != Tok::Arrow {
            return Err(self.expected("'->' and the block outputs after '}'"));
        }
        self.pos += 1;
        self.punct('(', "'(' to open the block outputs")?;
        let mut outputs = Vec::new();
        if !self.eat_punct(')') {
            loop {
                outputs.push(self.ident("an output value name")?);
                if self.eat_punct(')') {
                    break;
                }
                self.punct(',', "',' or ')' in the output list")?;
            }
        }
        Ok(Block {
            inputs,
            operations,
            outputs,
        })
    }

    fn named_value(&mut self, what: &str) -> Result<NamedValue> {
        let ty = self.value_type()?;
        let name = self.ident(&format!("a name for {what}"))?;
        Ok(NamedValue { name, ty })
    }

    fn operation(&mut self) -> Result<Operation> {
        let mut outputs = Vec::new();
        let no_outputs =
            matches!(self.peek(), Tok::Ident(_)) && *self.peek_at(1) == Tok::Punct('(');
        if self.eat_punct('(') {
            loop {
                outputs.push(self.named_value("an operation output")?);
                if self.eat_punct(')') {
                    break;
                }
                self.punct(',', "',' or ')' in the output list")?;
            }
            self.punct('=', "'=' after the operation outputs")?;
        } else if !no_outputs {
            loop {
                outputs.push(self.named_value("an operation output")?);
                if self.eat_punct('=') {
                    break;
                }
                self.punct(',', "',' or '=' after an operation output")?;
            }
        }
        let op_type = self.ident("an operation type")?;
        self.punct('(', &format!("'(' after operation type '{op_type}'"))?;
        let mut inputs: Vec<(String, Argument)> = Vec::new();
        if !self.eat_punct(')') {
            loop {
                let name = self.ident(&format!("an argument name for {op_type}"))?;
                self.punct('=', &format!("'=' after argument '{name}' of {op_type}"))?;
                let arg = self.argument(&name, &op_type)?;
                inputs.push((name.clone(), arg));
                if self.eat_punct(')') {
                    break;
                }
                self.punct(
                    ',',
                    &format!("',' or ')' after argument '{name}' of {op_type}"),
                )?;
            }
        }
        let attributes = if self.is_punct('[') {
            self.attribute_list(&op_type)?
        } else {
            Vec::new()
        };
        let mut blocks = Vec::new();
        while matches!(self.peek(), Tok::Ident(s) if s == "block") {
            self.pos += 1;
            self.punct('(', "'(' to open the block inputs")?;
            let mut block_inputs = Vec::new();
            if !self.eat_punct(')') {
                loop {
                    block_inputs.push(self.named_value("a block input")?);
                    if self.eat_punct(')') {
                        break;
                    }
                    self.punct(',', "',' or ')' after a block input")?;
                }
            }
            self.punct('{', "'{' to open the block")?;
            blocks.push(self.block_body(block_inputs)?);
        }
        self.punct(';', &format!("';' at the end of the {op_type} statement"))?;
        Ok(Operation {
            op_type,
            inputs,
            outputs,
            attributes,
            blocks,
        })
    }

    fn argument(&mut self, name: &str, op_type: &str) -> Result<Argument> {
        self.nest()?;
        let result = self.argument_inner(name, op_type);
        self.depth -= 1;
        result
    }

    fn argument_inner(&mut self, name: &str, op_type: &str) -> Result<Argument> {
        if self.eat_punct('(') {
            let mut items = Vec::new();
            if !self.eat_punct(')') {
                loop {
                    items.push(self.argument(name, op_type)?);
                    if self.eat_punct(')') {
                        break;
                    }
                    self.punct(
                        ',',
                        &format!("',' or ')' in the list for argument '{name}'"),
                    )?;
                }
            }
            return Ok(Argument::List(items));
        }
        match (self.peek(), self.peek_at(1)) {
            (Tok::Ident(_), Tok::Punct('(' | '<')) => Ok(Argument::Literal(self.literal()?)),
            (Tok::Ident(s), _) => {
                let s = s.clone();
                self.pos += 1;
                Ok(Argument::Name(s))
            }
            (Tok::Int(_) | Tok::Float(_) | Tok::Str(_), _) => Err(self.error(format!(
                "argument '{name}' of {op_type}: {} is untyped; write a typed literal such as int32(3) or string(\"x\")",
                self.peek().describe()
            ))),
            _ => Err(self.expected(&format!(
                "a value name, a typed literal or '(' for argument '{name}' of {op_type}"
            ))),
        }
    }

    fn attribute_list(&mut self, owner: &str) -> Result<Vec<(String, Literal)>> {
        self.punct('[', "'['")?;
        let mut out = Vec::new();
        if self.eat_punct(']') {
            return Ok(out);
        }
        loop {
            let name = self.ident(&format!("an attribute name for {owner}"))?;
            self.punct('=', &format!("'=' after attribute '{name}'"))?;
            out.push((name.clone(), self.literal()?));
            if self.eat_punct(']') {
                return Ok(out);
            }
            self.punct(',', &format!("',' or ']' after attribute '{name}'"))?;
        }
    }

    /// `fp16`, `tensor<fp16, [1, ?]>`, `tuple<..>`, `dict<K, V>`, `list<T, n>`.
    fn compound_type(&mut self) -> Result<CompoundType> {
        self.nest()?;
        let result = self.compound_type_inner();
        self.depth -= 1;
        result
    }

    fn compound_type_inner(&mut self) -> Result<CompoundType> {
        let (line, column) = self.here();
        let word = self.ident("a type")?;
        if let Some(dtype) = DType::from_name(&word) {
            return Ok(CompoundType::Tensor(TensorType::scalar(dtype)));
        }
        match word.as_str() {
            "tensor" => {
                self.punct('<', "'<' after 'tensor'")?;
                let (l, c) = self.here();
                let dt = self.ident("an element type such as fp16")?;
                let dtype = DType::from_name(&dt)
                    .ok_or_else(|| err_at(l, c, format!("unknown element type '{dt}'")))?;
                self.punct(',', "',' after the tensor element type")?;
                let shape = self.shape()?;
                self.punct('>', "'>' to close the tensor type")?;
                Ok(CompoundType::Tensor(TensorType { dtype, shape }))
            }
            "tuple" => {
                self.punct('<', "'<' after 'tuple'")?;
                let mut items = Vec::new();
                if !self.eat_punct('>') {
                    loop {
                        items.push(self.compound_type()?);
                        if self.eat_punct('>') {
                            break;
                        }
                        self.punct(',', "',' or '>' in a tuple type")?;
                    }
                }
                Ok(CompoundType::Tuple(items))
            }
            "dict" => {
                self.punct('<', "'<' after 'dict'")?;
                let key = self.compound_type()?;
                self.punct(',', "',' between the dict key and value types")?;
                let value = self.compound_type()?;
                self.punct('>', "'>' to close the dict type")?;
                Ok(CompoundType::Dict(Box::new(key), Box::new(value)))
            }
            "list" => {
                self.punct('<', "'<' after 'list'")?;
                let element = self.compound_type()?;
                self.punct(',', "',' and a length in a list type")?;
                let len = if self.eat_punct('?') {
                    None
                } else {
                    Some(self.dim_size("a list length or '?'")?)
                };
                self.punct('>', "'>' to close the list type")?;
                Ok(CompoundType::List(Box::new(element), len))
            }
            "state" => Err(err_at(
                line,
                column,
                "state<...> types (Core ML stateful models) are not supported",
            )),
            _ => Err(err_at(
                line,
                column,
                format!("expected a type, found '{word}'"),
            )),
        }
    }

    fn dim_size(&mut self, what: &str) -> Result<usize> {
        match self.peek() {
            Tok::Int(s) => {
                let n = s
                    .parse::<usize>()
                    .map_err(|_| self.error(format!("{s} is not a valid size")))?;
                self.pos += 1;
                Ok(n)
            }
            _ => Err(self.expected(what)),
        }
    }

    fn shape(&mut self) -> Result<Vec<Dim>> {
        self.punct('[', "'[' to open a shape")?;
        let mut dims = Vec::new();
        if self.eat_punct(']') {
            return Ok(dims);
        }
        loop {
            let dim = match self.peek() {
                Tok::Int(_) => Dim::Fixed(self.dim_size("a dimension")?),
                Tok::Ident(s) => {
                    let s = s.clone();
                    self.pos += 1;
                    Dim::Symbol(s)
                }
                Tok::Punct('?') => {
                    self.pos += 1;
                    Dim::Symbol("?".into())
                }
                _ => return Err(self.expected("a dimension (a size, a symbol or '?')")),
            };
            dims.push(dim);
            if self.eat_punct(']') {
                return Ok(dims);
            }
            self.punct(',', "',' or ']' in a shape")?;
        }
    }

    fn value_type(&mut self) -> Result<ValueType> {
        let (line, column) = self.here();
        let ty = self.compound_type()?;
        to_value_type(ty).map_err(|m| err_at(line, column, m))
    }

    /// A typed literal: `int32(3)`, `tensor<..>(..)` (inline or BLOBFILE), `dict<..>(..)`,
    /// or `(lit, ...)`.
    fn literal(&mut self) -> Result<Literal> {
        self.nest()?;
        let result = self.literal_inner();
        self.depth -= 1;
        result
    }

    fn literal_inner(&mut self) -> Result<Literal> {
        if self.eat_punct('(') {
            let mut items = Vec::new();
            if !self.eat_punct(')') {
                loop {
                    items.push(self.literal()?);
                    if self.eat_punct(')') {
                        break;
                    }
                    self.punct(',', "',' or ')' in a tuple literal")?;
                }
            }
            return Ok(Literal::Tuple(items));
        }
        let (line, column) = self.here();
        let ty = self.compound_type()?;
        self.punct('(', "'(' and the literal's value after its type")?;
        let lit = match ty {
            CompoundType::Tensor(ty) => {
                if matches!(self.peek(), Tok::Ident(s) if s == "BLOBFILE") {
                    self.blobfile(ty)?
                } else {
                    let raw = self.raw()?;
                    let data = tensor_data(raw, &ty)?;
                    Literal::Tensor { ty, data }
                }
            }
            CompoundType::Dict(k, v) => {
                let (key, value) = match (*k, *v) {
                    (CompoundType::Tensor(k), CompoundType::Tensor(v))
                        if k.is_scalar() && v.is_scalar() =>
                    {
                        (k.dtype, v.dtype)
                    }
                    _ => {
                        return Err(err_at(
                            line,
                            column,
                            "only dicts of scalars are supported here",
                        ))
                    }
                };
                let raw = self.raw()?;
                let (rl, rc) = (raw.line, raw.column);
                let RawKind::Dict(entries) = raw.kind else {
                    return Err(err_at(
                        rl,
                        rc,
                        format!(
                            "expected a '{{...}}' dict value, found {}",
                            raw.kind.describe()
                        ),
                    ));
                };
                let mut out = Vec::new();
                for (k, v) in entries {
                    out.push((scalar_literal(k, key)?, scalar_literal(v, value)?));
                }
                Literal::Dict {
                    key,
                    value,
                    entries: out,
                }
            }
            _ => {
                return Err(err_at(
                    line,
                    column,
                    "tuple and list typed literals are only supported as function attributes",
                ))
            }
        };
        self.punct(')', "')' to close the literal")?;
        Ok(lit)
    }

    fn blobfile(&mut self, ty: TensorType) -> Result<Literal> {
        let (line, column) = self.here();
        self.keyword("BLOBFILE")?;
        self.punct('(', "'(' after BLOBFILE")?;
        let mut path = None;
        let mut offset = None;
        loop {
            let (l, c) = self.here();
            let key = self.ident("'path' or 'offset' in BLOBFILE")?;
            self.punct('=', &format!("'=' after '{key}'"))?;
            match key.as_str() {
                "path" => {
                    let lit = self.literal()?;
                    let s = lit
                        .as_str()
                        .ok_or_else(|| err_at(l, c, "BLOBFILE path must be a string literal"))?;
                    path = Some(s.to_string());
                }
                "offset" => {
                    // Read as u64 directly: offsets may exceed the i64 range of inline data.
                    let ty = self.compound_type()?;
                    self.punct('(', "'(' and the offset value")?;
                    let raw = self.raw()?;
                    self.punct(')', "')' after the offset value")?;
                    let n = match (&ty, &raw.kind) {
                        (CompoundType::Tensor(t), RawKind::Int(text))
                            if t.is_scalar() && t.dtype.is_int() =>
                        {
                            text.parse::<u64>().ok()
                        }
                        _ => None,
                    };
                    offset = Some(n.ok_or_else(|| {
                        err_at(
                            l,
                            c,
                            "BLOBFILE offset must be a uint64 literal such as uint64(64)",
                        )
                    })?);
                }
                other => {
                    return Err(err_at(
                        l,
                        c,
                        format!("unknown BLOBFILE argument '{other}', expected 'path' or 'offset'"),
                    ))
                }
            }
            if self.eat_punct(')') {
                break;
            }
            self.punct(',', "',' or ')' in BLOBFILE")?;
        }
        match (path, offset) {
            (Some(path), Some(offset)) => Ok(Literal::Blob { ty, path, offset }),
            _ => Err(err_at(
                line,
                column,
                "BLOBFILE needs both 'path' and 'offset'",
            )),
        }
    }

    fn raw(&mut self) -> Result<Raw> {
        self.nest()?;
        let result = self.raw_inner();
        self.depth -= 1;
        result
    }

    fn raw_inner(&mut self) -> Result<Raw> {
        let (line, column) = self.here();
        let kind = match self.next() {
            Tok::Int(s) => RawKind::Int(s),
            Tok::Float(s) => RawKind::Float(s),
            Tok::Str(s) => RawKind::Str(s),
            Tok::Ident(s) if s == "true" => RawKind::Bool(true),
            Tok::Ident(s) if s == "false" => RawKind::Bool(false),
            Tok::Ident(s) if s == "inf" || s == "nan" => RawKind::Float(s),
            Tok::Punct('[') => RawKind::List(self.raw_seq(']')?),
            Tok::Punct('(') => RawKind::Tuple(self.raw_seq(')')?),
            Tok::Punct('{') => {
                let mut entries = Vec::new();
                if !self.eat_punct('}') {
                    loop {
                        self.punct('{', "'{' to open a dict entry")?;
                        let k = self.raw()?;
                        self.punct(',', "',' between a dict key and its value")?;
                        let v = self.raw()?;
                        self.punct('}', "'}' to close a dict entry")?;
                        entries.push((k, v));
                        if self.eat_punct('}') {
                            break;
                        }
                        self.punct(',', "',' or '}' after a dict entry")?;
                    }
                }
                RawKind::Dict(entries)
            }
            _ => {
                self.pos -= 1;
                return Err(self.expected("a value (number, string, true/false, '[', '(' or '{')"));
            }
        };
        Ok(Raw { kind, line, column })
    }

    fn raw_seq(&mut self, close: char) -> Result<Vec<Raw>> {
        let mut items = Vec::new();
        if self.eat_punct(close) {
            return Ok(items);
        }
        loop {
            items.push(self.raw()?);
            if self.eat_punct(close) {
                return Ok(items);
            }
            self.punct(',', &format!("',' or '{close}'"))?;
        }
    }
}

fn to_value_type(ty: CompoundType) -> std::result::Result<ValueType, String> {
    match ty {
        CompoundType::Tensor(t) => Ok(ValueType::Tensor(t)),
        CompoundType::Tuple(items) => Ok(ValueType::Tuple(
            items
                .into_iter()
                .map(to_value_type)
                .collect::<std::result::Result<_, _>>()?,
        )),
        CompoundType::Dict(k, v) => match (*k, *v) {
            (CompoundType::Tensor(k), CompoundType::Tensor(v))
                if k.is_scalar() && v.is_scalar() =>
            {
                Ok(ValueType::Dict {
                    key: k.dtype,
                    value: v.dtype,
                })
            }
            _ => Err("only dicts of scalars are supported as value types".into()),
        },
        CompoundType::List(..) => Err("list<...> value types are not supported".into()),
    }
}

/// Elements of an inline tensor literal: a scalar, nested lists matching the shape, or a flat
/// list of the right length.
fn tensor_data(raw: Raw, ty: &TensorType) -> Result<TensorData> {
    let (line, column) = (raw.line, raw.column);
    let mut leaves = Vec::new();
    if ty.is_scalar() {
        if matches!(raw.kind, RawKind::List(_)) {
            return Err(err_at(
                line,
                column,
                format!(
                    "expected a single value for scalar type {}, found a list",
                    crate::ty_string(ty)
                ),
            ));
        }
        leaves.push(raw);
    } else {
        let shape = ty.static_shape().ok_or_else(|| {
            err_at(
                line,
                column,
                format!(
                    "an inline literal needs a fixed shape, not {}",
                    crate::ty_string(ty)
                ),
            )
        })?;
        let count = ty.num_elements().unwrap_or(usize::MAX);
        let RawKind::List(items) = raw.kind else {
            return Err(err_at(
                line,
                column,
                format!(
                    "expected a '[...]' list for {}, found {}",
                    crate::ty_string(ty),
                    raw.kind.describe()
                ),
            ));
        };
        let flat =
            items.len() == count && items.iter().all(|r| !matches!(r.kind, RawKind::List(_)));
        if flat {
            leaves = items;
        } else {
            flatten(items, &shape, line, column, &mut leaves)?;
        }
    }
    let dtype = ty.dtype;
    Ok(match dtype {
        DType::String => TensorData::Str(
            leaves
                .into_iter()
                .map(|r| match r.kind {
                    RawKind::Str(s) => Ok(s),
                    other => Err(err_at(
                        r.line,
                        r.column,
                        format!("expected a string, found {}", other.describe()),
                    )),
                })
                .collect::<Result<_>>()?,
        ),
        DType::Bool => TensorData::Bool(
            leaves
                .into_iter()
                .map(|r| match r.kind {
                    RawKind::Bool(b) => Ok(b),
                    other => Err(err_at(
                        r.line,
                        r.column,
                        format!(
                            "expected true or false for bool, found {}",
                            other.describe()
                        ),
                    )),
                })
                .collect::<Result<_>>()?,
        ),
        d if d.is_float() => TensorData::Float(
            leaves
                .into_iter()
                .map(|r| float_value(&r, d))
                .collect::<Result<_>>()?,
        ),
        d => TensorData::Int(
            leaves
                .into_iter()
                .map(|r| int_value(&r, d))
                .collect::<Result<_>>()?,
        ),
    })
}

fn flatten(
    items: Vec<Raw>,
    shape: &[usize],
    line: usize,
    column: usize,
    out: &mut Vec<Raw>,
) -> Result<()> {
    let Some((&n, rest)) = shape.split_first() else {
        return Err(err_at(
            line,
            column,
            "nested list is deeper than the tensor's rank",
        ));
    };
    if items.len() != n {
        return Err(err_at(
            line,
            column,
            format!(
                "expected {n} elements at this level of the literal, found {}",
                items.len()
            ),
        ));
    }
    for item in items {
        if rest.is_empty() {
            if matches!(item.kind, RawKind::List(_)) {
                return Err(err_at(
                    item.line,
                    item.column,
                    "nested list is deeper than the tensor's rank",
                ));
            }
            out.push(item);
        } else {
            let (l, c) = (item.line, item.column);
            let RawKind::List(inner) = item.kind else {
                return Err(err_at(
                    l,
                    c,
                    format!(
                        "expected a '[...]' list of {} elements, found {}",
                        rest[0],
                        item.kind.describe()
                    ),
                ));
            };
            flatten(inner, rest, l, c, out)?;
        }
    }
    Ok(())
}

fn float_value(raw: &Raw, dtype: DType) -> Result<f64> {
    let text = match &raw.kind {
        RawKind::Float(s) | RawKind::Int(s) => s.as_str(),
        other => {
            return Err(err_at(
                raw.line,
                raw.column,
                format!("expected a number for {dtype}, found {}", other.describe()),
            ))
        }
    };
    parse_float(text, dtype).ok_or_else(|| {
        err_at(
            raw.line,
            raw.column,
            format!("'{text}' is not a valid {dtype} number"),
        )
    })
}

/// A float literal's text rounded to nearest in `dtype`.
fn parse_float(text: &str, dtype: DType) -> Option<f64> {
    let unsigned = text.trim_start_matches(['-', '+']);
    let negative = text.starts_with('-');
    let sign = if negative { -1.0 } else { 1.0 };
    match unsigned {
        "inf" => return Some(sign * f64::INFINITY),
        "nan" => return Some(f64::NAN),
        _ => {}
    }
    if unsigned.starts_with("0x") || unsigned.starts_with("0X") {
        return parse_hex(text)?.round_to(dtype);
    }
    round_f64_to(text.parse::<f64>().ok()?, dtype)
}

fn int_value(raw: &Raw, dtype: DType) -> Result<i64> {
    let RawKind::Int(text) = &raw.kind else {
        return Err(err_at(
            raw.line,
            raw.column,
            format!(
                "expected an integer for {dtype}, found {}",
                raw.kind.describe()
            ),
        ));
    };
    let range = dtype
        .int_range()
        .unwrap_or((i64::MIN as i128, i64::MAX as i128));
    let value = text
        .parse::<i128>()
        .ok()
        .filter(|v| *v >= range.0 && *v <= range.1);
    value.and_then(|v| i64::try_from(v).ok()).ok_or_else(|| {
        err_at(
            raw.line,
            raw.column,
            format!(
                "{text} is out of range for {dtype} ({}..={})",
                range.0, range.1
            ),
        )
    })
}

fn scalar_literal(raw: Raw, dtype: DType) -> Result<Literal> {
    let ty = TensorType::scalar(dtype);
    let data = tensor_data(raw, &ty)?;
    Ok(Literal::Tensor { ty, data })
}

fn compound_value(raw: Raw) -> Result<CompoundValue> {
    Ok(match raw.kind {
        RawKind::Str(s) => CompoundValue::Str(s),
        RawKind::Bool(b) => CompoundValue::Bool(b),
        RawKind::Int(s) => {
            CompoundValue::Int(s.parse::<i64>().map_err(|_| {
                err_at(raw.line, raw.column, format!("{s} does not fit in 64 bits"))
            })?)
        }
        RawKind::Float(s) => {
            CompoundValue::Float(parse_float(&s, DType::Fp64).ok_or_else(|| {
                err_at(raw.line, raw.column, format!("'{s}' is not a valid number"))
            })?)
        }
        RawKind::List(items) => CompoundValue::List(
            items
                .into_iter()
                .map(compound_value)
                .collect::<Result<_>>()?,
        ),
        RawKind::Tuple(items) => CompoundValue::Tuple(
            items
                .into_iter()
                .map(compound_value)
                .collect::<Result<_>>()?,
        ),
        RawKind::Dict(entries) => CompoundValue::Dict(
            entries
                .into_iter()
                .map(|(k, v)| Ok((compound_value(k)?, compound_value(v)?)))
                .collect::<Result<_>>()?,
        ),
    })
}
